use super::*;

#[test]
fn type_meta_goes_in_front() {
    let out = with_type_meta(br#"{"metadata":{"name":"a"}}"#, "Pod", "v1");
    assert_eq!(
        out,
        br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a"}}"#
    );
    let out = with_type_meta(b" { } ", "Pod", "v1");
    assert_eq!(out, br#"{"kind":"Pod","apiVersion":"v1" } "#);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["kind"], "Pod");
}
