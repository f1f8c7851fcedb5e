//! kubelet's node Lease as it sends it by default: Kubernetes protobuf, for tests that play
//! kubelet with `Content-Type: application/vnd.kubernetes.protobuf`.
//!
//! Field numbers: k8s.io/api coordination/v1/generated.proto (Lease, LeaseSpec),
//! k8s.io/apimachinery pkg/apis/meta/v1/generated.proto (ObjectMeta, OwnerReference,
//! MicroTime) and pkg/runtime/generated.proto (Unknown, TypeMeta).

/// A kubelet node Lease as a whole protobuf body: `k8s\0`, then a `runtime.Unknown` with
/// typeMeta {coordination.k8s.io/v1, Lease}, the Lease as raw, and empty contentEncoding
/// and contentType (Go writes both). The owner, when given, is the Node `name` with that uid,
/// as kubelet names it.
pub fn encode_lease(
    name: &str,
    namespace: &str,
    holder: &str,
    duration_secs: i32,
    renew_unix_secs: i64,
    renew_nanos: i32,
    owner_uid: Option<&str>,
) -> Vec<u8> {
    let mut metadata = [bytes(1, name.as_bytes()), bytes(3, namespace.as_bytes())].concat();
    if let Some(uid) = owner_uid {
        let owner = [
            bytes(1, b"Node"),
            bytes(3, name.as_bytes()),
            bytes(4, uid.as_bytes()),
            bytes(5, b"v1"),
        ]
        .concat();
        metadata.extend(bytes(13, &owner));
    }
    let renew = [
        number(1, renew_unix_secs as u64),
        number(2, i64::from(renew_nanos) as u64),
    ]
    .concat();
    let spec = [
        bytes(1, holder.as_bytes()),
        // int32 is sign-extended to 64 bits on the wire.
        number(2, i64::from(duration_secs) as u64),
        bytes(4, &renew),
    ]
    .concat();
    let lease = [bytes(1, &metadata), bytes(2, &spec)].concat();
    let type_meta = [bytes(1, b"coordination.k8s.io/v1"), bytes(2, b"Lease")].concat();
    [
        b"k8s\0".to_vec(),
        bytes(1, &type_meta),
        bytes(2, &lease),
        bytes(3, b""),
        bytes(4, b""),
    ]
    .concat()
}

/// A base-128 varint.
pub fn varint(mut value: u64) -> Vec<u8> {
    let mut out = Vec::new();
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
    out
}

/// A varint field (wire type 0).
pub fn number(field: u64, value: u64) -> Vec<u8> {
    [varint(field << 3), varint(value)].concat()
}

/// A length-delimited field (wire type 2): a string, bytes or a message.
pub fn bytes(field: u64, value: &[u8]) -> Vec<u8> {
    [
        varint(field << 3 | 2),
        varint(value.len() as u64),
        value.to_vec(),
    ]
    .concat()
}
