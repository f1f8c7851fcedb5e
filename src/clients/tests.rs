use super::*;

#[test]
fn errors_read_as_the_log_lines_did() {
    let cases = [
        (ClientError::Status(503), "the cloud answered 503"),
        (ClientError::QueueFull, "the writer queue stayed full"),
        (
            ClientError::NotCacheable(NoCacheReason::Event),
            "not cacheable: event",
        ),
        (
            ClientError::Answer("the list has no resourceVersion"),
            "the list has no resourceVersion",
        ),
        (
            ClientError::Refused("not a read: Watch".into()),
            "not a read: Watch",
        ),
    ];
    for (error, text) in cases {
        assert_eq!(error.to_string(), text);
    }
}
