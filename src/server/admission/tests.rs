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
