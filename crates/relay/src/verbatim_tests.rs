use super::*;
use http::Method;

fn mounts() -> Mounts {
    Mounts::with_overrides(&[Mount::parse_arg("up=http://127.0.0.1:9/base").unwrap()])
}

fn routed(head: &str) -> Routed {
    match parse_request(head.as_bytes(), &mounts()) {
        Parsed::Complete(len, r) => {
            assert_eq!(len, head.len(), "the whole head is used");
            r
        }
        Parsed::Partial => panic!("partial: {head:?}"),
        Parsed::Handover => panic!("handed to hyper: {head:?}"),
    }
}

fn hands_over(head: &str) -> bool {
    matches!(parse_request(head.as_bytes(), &mounts()), Parsed::Handover)
}

#[test]
fn a_plain_post_is_taken_with_its_length_and_route() {
    let r = routed("POST /up/v1/messages?beta=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n");
    assert_eq!(r.head.method, Method::POST);
    assert_eq!(r.head.body_len, 12);
    assert!(!r.head.close);
    assert_eq!(r.mount.name, "up");
    assert_eq!(r.rest, "/v1/messages?beta=1");
    assert_eq!(
        r.uri.to_string(),
        "http://127.0.0.1:9/base/v1/messages?beta=1"
    );
    let r = routed("GET /up/x HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert_eq!((r.head.body_len, r.head.close), (0, true));
}

#[test]
fn a_path_no_mount_routes_goes_to_hyper() {
    // hyper's path answers the 404.
    assert!(hands_over("GET /nowhere/x HTTP/1.1\r\n\r\n"));
}
