//! Unit tests of admission: eviction order.

use std::io::Read;
use std::net::{TcpListener, TcpStream};

use super::*;

/// A connected pair: the server side to track, the client side to watch.
fn pair(listener: &TcpListener) -> (TcpStream, TcpStream) {
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    (server, client)
}

fn closed(client: &mut TcpStream) -> bool {
    client
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    matches!(client.read(&mut [0u8; 1]), Ok(0))
}

#[test]
fn eviction_takes_new_silent_connections_before_idle_ones_and_never_busy_ones() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let load = Load::default();
    let mut clients = Vec::new();
    let mut tracked = Vec::new();
    for _ in 0..4 {
        let (server, client) = pair(&listener);
        let t: Arc<Tracked> = Arc::new(Tracked {
            stream: server,
            rank: AtomicU64::new(BUSY),
        });
        load.open().push(Arc::clone(&t));
        clients.push(client);
        tracked.push(t);
    }
    // 0: idle after a request, waiting longest; 1: busy; 2 and 3: never sent a request,
    // 3 waiting longer than 2.
    tracked[0].waiting(&load, true);
    tracked[3].waiting(&load, false);
    tracked[2].waiting(&load, false);

    for expected in [3, 2, 0] {
        assert!(load.evict_one());
        assert!(
            closed(&mut clients[expected]),
            "connection {expected} evicted"
        );
    }
    assert!(!load.evict_one(), "a busy connection is never evicted");
    assert!(!closed(&mut clients[1]));
    assert_eq!(load.open().len(), 1);
    load.forget(&tracked[1]);
    assert!(load.open().is_empty());
}

/// The proxy ports' caps at `--max-requests-in-flight=8`: a fair total of 4, a ceiling of 8.
const PROXY: LongRunningLimits = LongRunningLimits {
    fair_total: 4,
    ceiling: 8,
    per_key: 4,
    reserve: 2,
};

/// The same caps with no slots kept for the node: the share rule alone.
const SHARES: LongRunningLimits = LongRunningLimits {
    reserve: 0,
    ..PROXY
};

#[test]
fn the_proxy_ports_long_running_caps_leave_short_requests_their_connections() {
    for in_flight in [1, 2, 8, 250, 1000] {
        let limits = LongRunningLimits::for_in_flight(in_flight);
        let connections = in_flight.saturating_mul(2).max(64);
        assert!(limits.fair_total >= 1 && limits.fair_total <= limits.ceiling);
        assert!(limits.per_key <= limits.fair_total);
        assert!(
            in_flight + limits.ceiling <= connections,
            "{in_flight}: short requests and watches together fit in the connections"
        );
    }
    assert_eq!(LongRunningLimits::for_in_flight(8), PROXY);
    assert_eq!(LongRunningLimits::for_in_flight(250).fair_total, 125);
}

#[test]
fn one_key_holds_at_most_its_cap_and_takes_no_short_slot() {
    let load = Load::default();
    for _ in 0..4 {
        load.enter_long_running("flood", true, &PROXY).unwrap();
    }
    assert_eq!(
        load.enter_long_running("flood", true, &PROXY),
        Err(LongRunningRefusal::PerKey { held: 4 })
    );
    assert_eq!(load.in_flight.load(Ordering::Acquire), 0);
    // Short requests are counted apart: all of them are free.
    let short: Vec<_> = (0..8).map(|_| enter_short(&load, 8).unwrap()).collect();
    assert!(enter_short(&load, 8).is_none());
    assert_eq!(
        load.in_flight(),
        12,
        "both kinds are waited for at shutdown"
    );
    drop(short);
    assert_eq!(load.in_flight(), 4);
}

#[test]
fn past_the_fair_total_a_key_under_its_share_gets_in_and_one_over_it_does_not() {
    let load = Load::default();
    for _ in 0..4 {
        load.enter_long_running("flood", false, &SHARES).unwrap();
    }
    // Two keys now: a share is 4 / 2 = 2; the flood holds more.
    load.enter_long_running("kubelet", false, &SHARES).unwrap();
    load.enter_long_running("kubelet", false, &SHARES).unwrap();
    assert_eq!(
        load.enter_long_running("kubelet", false, &SHARES),
        Err(LongRunningRefusal::Share {
            held: 2,
            total: 6,
            keys: 2
        })
    );
    // A third key: its share is 4 / 3; holding 0, then 1, it is under it.
    load.enter_long_running("kube-proxy", false, &SHARES)
        .unwrap();
    load.enter_long_running("kube-proxy", false, &SHARES)
        .unwrap();
    assert_eq!(load.long_running(), 8);
    // Given back: the flood's slots go; at the fair total the shares still hold (4 / 2).
    for _ in 0..4 {
        load.leave_long_running("flood");
    }
    assert!(matches!(
        load.enter_long_running("kubelet", false, &SHARES),
        Err(LongRunningRefusal::Share { held: 2, .. })
    ));
    // Below the fair total any key gets in.
    load.leave_long_running("kube-proxy");
    load.enter_long_running("kubelet", false, &SHARES).unwrap();
    assert_eq!(load.long_running(), 4);
}

#[test]
fn the_ceiling_holds_whatever_the_keys() {
    let load = Load::default();
    for i in 0..8 {
        load.enter_long_running(&format!("key-{i}"), true, &PROXY)
            .unwrap();
    }
    assert_eq!(
        load.enter_long_running("key-new", true, &PROXY),
        Err(LongRunningRefusal::Ceiling { total: 8 })
    );
    let reason = LongRunningRefusal::Ceiling { total: 8 }.reason(&PROXY);
    assert!(reason.contains("8 long-running requests"), "{reason}");
    // Keys that left leave no entry behind.
    for i in 0..8 {
        load.leave_long_running(&format!("key-{i}"));
    }
    assert_eq!(load.long_running(), 0);
    assert!(load.long_running.lock().unwrap().held.is_empty());
}

#[test]
fn the_reserve_keeps_the_last_slots_for_the_node_whatever_the_other_keys() {
    let limits = LongRunningLimits::for_in_flight(8);
    assert_eq!(limits.reserve, 2);
    let load = Load::default();
    // Pods with a credential each: refused at the ceiling less the reserve.
    for i in 0..6 {
        load.enter_long_running(&format!("pod-{i}"), false, &limits)
            .unwrap();
    }
    assert_eq!(
        load.enter_long_running("pod-new", false, &limits),
        Err(LongRunningRefusal::Reserved { total: 6 })
    );
    // kubelet still gets in, up to the ceiling.
    load.enter_long_running("plain/none/kubelet", true, &limits)
        .unwrap();
    load.enter_long_running("plain/none/kubelet", true, &limits)
        .unwrap();
    assert_eq!(
        load.enter_long_running("plain/none/kubelet", true, &limits),
        Err(LongRunningRefusal::Ceiling { total: 8 })
    );
}
