//! Issue 29: a watch through the hub outlives the cloud's faults on the same connection.
//! A watch that is not a cache agent's is resumed across an outage while the cloud keeps its
//! history, and ended cleanly (terminal chunk, no ERROR) when the history is gone, since the
//! hub holds no copy of what that client was sent; a resume the cloud answers with garbage
//! is retried while the client waits, and none of the garbage reaches it.

use std::io::{BufRead, BufReader};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::hub::*;
use crate::support::{Cloud, RecordedRequest};

/// A client that is not a cache agent: its watch resumes, but is never rebuilt.
const CONTROLLER: &str = "my-controller/1.0";

/// The longest a test waits for one event or end: the health checker's verdict, the resume
/// jitter (< 5 s) and backoffs, with room for a loaded machine.
const PATIENCE: Duration = Duration::from_secs(40);

/// What a watch stream brought.
#[derive(Debug)]
enum Got {
    /// One event line, parsed.
    Event(Value),
    /// A line that is not JSON (garbage that got through).
    Garbage(String),
    /// The stream ended: with its terminal chunk (`clean`), or cut.
    End { clean: bool },
}

/// A watch stream read on its own thread, so that every wait has a bound.
struct Watch {
    rx: Receiver<Got>,
}

impl Watch {
    fn open(url: &str, ua: &str) -> Watch {
        let (status, body) = stream(url, ua);
        assert_eq!(status, 200, "GET {url}");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let mut reader = BufReader::new(body);
            loop {
                let mut line = String::new();
                let got = match reader.read_line(&mut line) {
                    Ok(0) => Got::End { clean: true },
                    Err(_) => Got::End { clean: false },
                    Ok(_) if line.trim().is_empty() => continue,
                    Ok(_) => match serde_json::from_str(&line) {
                        Ok(v) => Got::Event(v),
                        Err(_) => Got::Garbage(line),
                    },
                };
                let end = matches!(got, Got::End { .. });
                if tx.send(got).is_err() || end {
                    return;
                }
            }
        });
        Watch { rx }
    }

    /// The next thing the stream brought other than a BOOKMARK (None: nothing in `wait`).
    fn next(&self, wait: Duration) -> Option<Got> {
        loop {
            match self.rx.recv_timeout(wait) {
                Ok(Got::Event(e)) if e["type"] == "BOOKMARK" => {}
                Ok(got) => return Some(got),
                Err(RecvTimeoutError::Timeout) => return None,
                Err(RecvTimeoutError::Disconnected) => return Some(Got::End { clean: false }),
            }
        }
    }

    /// The next event; panics on anything else.
    fn event(&self, what: &str) -> Value {
        match self.next(PATIENCE) {
            Some(Got::Event(e)) => {
                assert_ne!(e["type"], "ERROR", "{what}: the client got an ERROR: {e}");
                e
            }
            Some(Got::Garbage(line)) => panic!("{what}: garbage reached the client: {line:?}"),
            other => panic!("{what}: expected an event, got {other:?}"),
        }
    }
}

fn pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": "busybox"}]}
    })
}

/// (type, name, resourceVersion) of an event.
fn said(e: &Value) -> (String, String, u64) {
    let meta = &e["object"]["metadata"];
    (
        e["type"].as_str().unwrap_or("").to_owned(),
        meta["name"].as_str().unwrap_or("").to_owned(),
        meta["resourceVersion"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .unwrap_or(0),
    )
}

fn rv_of(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .expect("a resourceVersion")
}

/// The cloud goes away until the hub has seen it down, `during` runs meanwhile, then it
/// comes back.
fn outage(cloud: &Cloud, hub: &Hub, during: impl FnOnce()) {
    cloud.stop();
    during();
    assert!(
        hub.wait_healthy(cloud, false, PATIENCE),
        "the hub never saw the cloud down: {}",
        hub.logs()
    );
    cloud.restart();
}

/// A list of `path` (pods, with a query) through the hub, and a watch from its
/// resourceVersion, as an informer does.
fn list_then_watch(cloud: &Cloud, hub: &Hub, ua: &str, path: &str) -> Watch {
    let list = get(&format!("{}{path}", hub.url()), ua);
    assert_eq!(list.status, 200, "{}", list.text());
    let rv = list.json()["metadata"]["resourceVersion"]
        .as_str()
        .expect("the list's resourceVersion")
        .to_owned();
    let watch = Watch::open(
        &format!(
            "{}{path}&watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=600",
            hub.url()
        ),
        ua,
    );
    assert!(cloud.wait_for_watchers("pods", 1, PATIENCE));
    watch
}

#[test]
fn a_watch_that_is_not_the_cache_agents_survives_history_and_ends_cleanly_without_it() {
    let cloud = Cloud::start();
    // Bookmarks keep a quiet stream moving: the resumed leg's caught-up line is written at
    // its first write after the catch-up window.
    cloud.set_bookmark_interval(Some(Duration::from_secs(1)));
    cloud.create("pods", pod("web-1"));
    let dir = TempDir::new("resume-controller");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let watch = list_then_watch(
        &cloud,
        &hub,
        CONTROLLER,
        "/api/v1/namespaces/default/pods?labelSelector=app%3Dweb",
    );

    // An outage the cloud's history covers: the changes come on the same stream, in order.
    let mut made = Vec::new();
    outage(&cloud, &hub, || {
        made.push(rv_of(&cloud.create("pods", pod("web-2"))));
        made.push(rv_of(&cloud.patch(
            "pods",
            "default",
            "web-1",
            json!({"metadata": {"labels": {"app": "web", "v": "2"}}}),
        )));
    });
    let first = said(&watch.event("after the first outage"));
    let second = said(&watch.event("after the first outage"));
    assert_eq!(
        [first, second],
        [
            ("ADDED".to_owned(), "web-2".to_owned(), made[0]),
            ("MODIFIED".to_owned(), "web-1".to_owned(), made[1]),
        ]
    );
    assert!(
        hub.wait_log_line(
            |l| l.contains("watch resumed") && l.contains("resource=\"pods\""),
            PATIENCE
        ),
        "{}",
        hub.logs()
    );

    // An outage past the history: the hub cannot rebuild this client's view, so the stream
    // ends as a watch's own timeout would, with no ERROR and no event of the outage.
    outage(&cloud, &hub, || {
        cloud.create("pods", pod("web-3"));
        cloud.compact();
    });
    match watch.next(PATIENCE) {
        Some(Got::End { clean: true }) => {}
        other => panic!("expected a clean end after the history was gone, got {other:?}"),
    }
    assert!(
        hub.wait_log_line(
            |l| l.contains("cannot rebuild the client's view") && l.contains("resource=\"pods\""),
            PATIENCE
        ),
        "the hub says why it ended the watch: {}",
        hub.logs()
    );
}

#[test]
fn a_resume_answered_with_garbage_is_retried_while_the_client_waits() {
    let cloud = Cloud::start();
    cloud.set_record_requests(true);
    cloud.create("pods", pod("web-1"));
    let dir = TempDir::new("resume-garbage");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let watch = list_then_watch(
        &cloud,
        &hub,
        KUBELET,
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1",
    );

    cloud.stop();
    let made = rv_of(&cloud.create("pods", pod("web-2")));
    assert!(hub.wait_healthy(&cloud, false, PATIENCE), "{}", hub.logs());
    // The next two pod watches get a 200 whose body starts an event and turns into an HTML
    // error page: a broken middlebox.
    cloud.misanswer_watch(
        "/api/v1/pods",
        2,
        &[
            b"{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\",",
            b"<html>oops</html>\n",
        ],
    );
    cloud.reset_requests();
    cloud.restart();

    let added = said(&watch.event("after the garbage"));
    assert_eq!(added, ("ADDED".to_owned(), "web-2".to_owned(), made));
    let pod_watches = |r: &RecordedRequest| r.path == "/api/v1/pods" && r.is_watch();
    assert_eq!(
        cloud.count(pod_watches),
        3,
        "two misanswered resumes, then the one that worked: {:?}",
        cloud.requests()
    );
    // Still the same stream, open, and nothing else came: no garbage, no half event.
    cloud.create("pods", pod("web-3"));
    let (kind, name, _) = said(&watch.event("after the resume"));
    assert_eq!((kind.as_str(), name.as_str()), ("ADDED", "web-3"));
    match watch.next(Duration::from_millis(500)) {
        None => {}
        other => panic!("nothing more was due, got {other:?}"),
    }
}

#[test]
fn resumes_answered_with_garbage_back_off() {
    let cloud = Cloud::start();
    cloud.set_record_requests(true);
    cloud.create("pods", pod("web-1"));
    let dir = TempDir::new("resume-garbage-backoff");
    let hub = Hub::start(&HubSpec::for_cloud(&cloud, dir.path()));
    let watch = list_then_watch(
        &cloud,
        &hub,
        KUBELET,
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1",
    );

    // Every pod watch from now on gets a 200 whose body turns into an HTML page; the cloud
    // stays up and healthy, so nothing but the backoff spaces the resumes.
    cloud.misanswer_watch(
        "/api/v1/pods",
        usize::MAX,
        &[
            b"{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\",",
            b"<html>oops</html>\n",
        ],
    );
    cloud.reset_requests();
    assert_eq!(cloud.cut_watches("pods"), 1);
    let window = Duration::from_secs(6);
    assert!(
        watch.next(window).is_none(),
        "nothing reaches the client meanwhile"
    );
    // A backoff from 1 s doubling (±10 %): resumes at about 0, 1, 3 s (the next at 7 s).
    let pod_watches = |r: &RecordedRequest| r.path == "/api/v1/pods" && r.is_watch();
    let resumes = cloud.count(pod_watches);
    assert!(
        (2..=5).contains(&resumes),
        "{resumes} resumes in {window:?}, expected a few, backed off"
    );

    // The cloud answers again: the same stream goes on.
    cloud.misanswer_watch("/api/v1/pods", 0, &[]);
    cloud.create("pods", pod("web-2"));
    let (kind, name, _) = said(&watch.event("after the garbage stopped"));
    assert_eq!((kind.as_str(), name.as_str()), ("ADDED", "web-2"));
}
