use std::io::{self, Read};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use super::*;
use crate::cache::decode::BodyShape;
use crate::cache::key::{CollectionKey, ObjectKey};
use crate::cache::store::Store;
use crate::cache::target::CacheTarget;
use crate::cache::writer::{CacheTx, Session, WriterOptions, channel, run};
use crate::filters::body::{BodyFilter, StageTime};
use crate::filters::testing::{FakeLookups, ctx};
use crate::filters::{Chain, FilterName};

/// An end that records what reached it.
#[derive(Default)]
struct Record {
    bytes: Vec<u8>,
    chunks: Vec<usize>,
    finished: bool,
    aborted: u32,
    uncached: Vec<String>,
}

impl Sink for Record {
    fn write(&mut self, data: &[u8]) -> Result<(), Stop> {
        self.bytes.extend_from_slice(data);
        self.chunks.push(data.len());
        Ok(())
    }
    fn finish(&mut self) -> Result<(), Stop> {
        self.finished = true;
        Ok(())
    }
    fn abort(&mut self) {
        self.aborted += 1;
    }
    fn uncache(&mut self, why: Uncached) -> Result<(), Stop> {
        self.uncached.push(format!("{why:?}"));
        Ok(())
    }
}

/// A source that gives `body`, then fails.
struct Breaks<'a>(&'a [u8]);

impl Read for Breaks<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.0.is_empty() {
            return Err(io::Error::new(io::ErrorKind::ConnectionReset, "reset"));
        }
        let n = buf.len().min(self.0.len());
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

#[test]
fn reads_start_small_and_grow_once_a_read_fills_the_buffer() {
    let body = vec![b'x'; 40 * 1024];
    let mut sink = Record::default();
    let mut traffic = 0;
    let pumped = pump(
        &mut &body[..],
        &mut BodyReads::watch(),
        &mut traffic,
        &mut sink,
    );
    assert!(matches!(pumped, Pumped::Whole));
    assert!(sink.finished);
    assert_eq!(sink.bytes, body);
    assert_eq!(traffic, body.len() as u64);
    // The first read waits without a buffer (a watch may see nothing for hours).
    assert_eq!(sink.chunks[..4], [64, BUFFER_START, BUFFER, BUFFER]);
}

#[test]
fn a_source_that_breaks_off_aborts_the_sinks_and_finishes_nothing() {
    let mut sink = Record::default();
    let mut traffic = 0;
    let pumped = pump(
        &mut Breaks(b"{\"items\":["),
        &mut BodyReads::watch(),
        &mut traffic,
        &mut sink,
    );
    assert!(matches!(pumped, Pumped::BrokeOff(_)), "{pumped:?}");
    assert!(!sink.finished);
    assert_eq!(sink.aborted, 1);
    assert_eq!(traffic, 10);
}

fn filtered(body: &[u8], hold_raw: bool) -> (Pumped, Record) {
    let lookups = FakeLookups::default();
    let ctx = ctx();
    let chain = Chain::EMPTY.with(FilterName::MasterService);
    let filter = BodyFilter::new(BodyShape::List, false, chain, &ctx, &lookups);
    let mut stage = FilterStage::new(Record::default(), filter, StageTime::new(chain), hold_raw);
    let pumped = pump(&mut &body[..], &mut BodyReads::watch(), &mut 0, &mut stage);
    let end = std::mem::take(stage.inner_mut());
    (pumped, end)
}

#[test]
fn a_body_undecodable_from_its_start_passes_unchanged_when_held_and_is_cut_otherwise() {
    let body = b"<html>not JSON</html>";
    let (pumped, end) = filtered(body, true);
    assert!(matches!(pumped, Pumped::Whole), "{pumped:?}");
    assert_eq!(end.bytes, body);
    assert!(end.finished);
    assert_eq!(end.uncached.len(), 1);
    assert!(
        end.uncached[0].starts_with("Undecodable"),
        "{:?}",
        end.uncached
    );

    let (pumped, end) = filtered(body, false);
    assert!(
        matches!(pumped, Pumped::Stopped(Stop::Undecodable)),
        "{pumped:?}"
    );
    assert!(end.bytes.is_empty());
    assert!(!end.finished);
    assert_eq!(end.aborted, 1);
}

#[test]
fn a_filtered_list_reaches_the_end_filtered_and_finished() {
    let body = br#"{"kind":"ServiceList","apiVersion":"v1","metadata":{},"items":[{"metadata":{"namespace":"default","name":"kubernetes"},"spec":{"clusterIP":"10.96.0.1"}}]}"#;
    let (pumped, end) = filtered(body, true);
    assert!(matches!(pumped, Pumped::Whole), "{pumped:?}");
    assert!(end.finished);
    assert!(end.uncached.is_empty());
    let list: serde_json::Value = serde_json::from_slice(&end.bytes).expect("JSON");
    assert_eq!(list["items"][0]["spec"]["clusterIP"], "169.254.2.1");
}

/// A scratch directory, removed when dropped.
pub(crate) struct Scratch(pub(crate) PathBuf);

impl Scratch {
    /// `tinyhub-<tag>-<pid>` in the temporary directory, empty.
    pub(crate) fn new(tag: &str) -> Scratch {
        let path = std::env::temp_dir().join(format!("tinyhub-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        Scratch(path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The writer thread's work, run over the other end of a [`DiskCache`]'s channel.
type Writer = Box<dyn FnOnce(&Store)>;

/// A real disk cache behind a test's tee: a store in a scratch directory, and the writer's
/// channel, run when the test is done writing.
pub(crate) struct DiskCache {
    /// The store the writer applies to.
    pub(crate) store: Store,
    /// kube-proxy's EndpointSlices, the collection [`DiskCache::session`] writes.
    pub(crate) slices: CollectionKey,
    /// The writer's channel, until [`DiskCache::write_out`].
    tx: Option<CacheTx>,
    /// The writer, run over the channel's other end to the end of its input.
    writer: Option<Writer>,
    _dir: Scratch,
}

impl DiskCache {
    /// An empty store in scratch directory `tag`.
    pub(crate) fn open(tag: &str) -> DiskCache {
        let dir = Scratch::new(tag);
        let (store, _) = Store::open(&dir.0).unwrap();
        let (tx, rx) = channel(64, 1 << 20);
        let writer = move |store: &Store| {
            let synced = crate::cache::synced::Synced::default();
            run(
                store,
                rx,
                &AtomicBool::new(false),
                WriterOptions::default(),
                &synced,
            );
        };
        DiskCache {
            store,
            slices: CollectionKey::new("kube-proxy", "endpointslices", "v1", "discovery.k8s.io"),
            tx: Some(tx),
            writer: Some(Box::new(writer)),
            _dir: dir,
        }
    }

    /// A watch session of the slices, as a 200 answer begins it (it must begin).
    pub(crate) fn session(&self) -> Option<Session> {
        let tx = self.tx.as_ref().expect("not written out yet");
        let session = tx.begin(
            CacheTarget::Watch {
                collection: self.slices.clone(),
            },
            200,
            false,
            None,
        );
        assert!(session.is_some());
        session
    }

    /// Closes the channel and runs the writer until it applied everything sent.
    pub(crate) fn write_out(&mut self) {
        drop(self.tx.take());
        let writer = self.writer.take().expect("written out once");
        writer(&self.store);
    }

    /// The stored bytes of slice `namespace/name`.
    pub(crate) fn stored(&self, namespace: &str, name: &str) -> Option<Vec<u8>> {
        self.store
            .get(&ObjectKey {
                collection: self.slices.clone(),
                namespace: Some(namespace.to_owned()),
                name: name.to_owned(),
            })
            .unwrap()
    }
}

/// Issue 30: bytes written client-only reach the client and never the disk cache, bytes
/// written session-only reach the disk cache and never the client, and the session goes on
/// copying what follows.
#[test]
fn a_tee_sends_each_write_where_its_mode_says() {
    let mut disk = DiskCache::open("stream-tee-copying");
    let event = |name: &str, ip: &str| {
        format!(
            r#"{{"type":"ADDED","object":{{"kind":"EndpointSlice","apiVersion":"discovery.k8s.io/v1","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"7"}},"endpoints":[{{"addresses":["{ip}"]}}]}}}}"#
        ) + "\n"
    };
    let session = disk.session();
    let note = |_: &Uncached, _: bool| {};
    let mut tee = Tee::new(Record::default(), session, &note);
    tee.write(event("a", "10.0.0.1").as_bytes()).unwrap();
    tee.set_mode(TeeMode::ClientOnly);
    tee.write(event("b", "10.0.0.2").as_bytes()).unwrap();
    // Events for the session only follow the mode too; they never reach the client.
    tee.session_only(event("e", "10.0.0.5").as_bytes()).unwrap();
    tee.set_mode(TeeMode::SessionOnly);
    tee.write(event("d", "10.0.0.4").as_bytes()).unwrap();
    tee.set_mode(TeeMode::Both);
    tee.write(event("c", "10.0.0.3").as_bytes()).unwrap();
    tee.session_only(event("f", "10.0.0.6").as_bytes()).unwrap();
    assert!(tee.session_intact(), "the session stays alive");
    tee.end_session(true);
    let client = String::from_utf8(tee.inner_mut().bytes.clone()).unwrap();
    assert_eq!(
        client,
        event("a", "10.0.0.1") + &event("b", "10.0.0.2") + &event("c", "10.0.0.3")
    );
    disk.write_out();
    let stored = |name: &str| disk.stored("ns", name);
    assert!(stored("a").is_some());
    assert_eq!(stored("b"), None, "written client-only");
    assert!(stored("c").is_some());
    assert!(stored("d").is_some(), "written session-only");
    assert_eq!(stored("e"), None, "for the session only, but client-only");
    assert!(stored("f").is_some(), "for the session only");
}

/// A source that answers each read with the next of its pieces (as much as fits).
struct Pieces(std::collections::VecDeque<Vec<u8>>);

impl Read for Pieces {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let Some(mut piece) = self.0.pop_front() else {
            return Ok(0);
        };
        let n = piece.len().min(out.len());
        out[..n].copy_from_slice(&piece[..n]);
        if n < piece.len() {
            self.0.push_front(piece.split_off(n));
        }
        Ok(n)
    }
}

#[test]
fn a_streams_buffer_grows_for_a_burst_and_shrinks_back_when_it_ends() {
    let burst = vec![b'x'; 3 * BUFFER];
    let mut source = Pieces([burst, b"{}\n".to_vec(), b"{}\n".to_vec()].into());
    let mut reads = BodyReads::watch();
    let mut traffic = 0;
    let mut sizes = Vec::new();
    let mut held = Vec::new();
    while let Some(chunk) = reads.next(&mut source, &mut traffic).unwrap() {
        sizes.push(chunk.len());
        if sizes.len() == 3 {
            assert_eq!(reads.buf.len(), BUFFER, "grown once a read filled it");
        }
        held.push(reads.buf.capacity());
    }
    assert_eq!(traffic, 3 * BUFFER as u64 + 6);
    assert_eq!(
        sizes[..3],
        [64, BUFFER_START, BUFFER],
        "a wait without a buffer, then 4 KiB, then 16 KiB reads"
    );
    // The first `{}` came in the 16 KiB buffer; that short read ended the burst, so the
    // second was waited for without one.
    assert_eq!(sizes[sizes.len() - 2..], [3, 3]);
    assert_eq!(
        held[held.len() - 2..],
        [BUFFER, 0],
        "a short read ends the burst: a waiting watch holds no buffer"
    );
}

#[test]
fn an_answer_with_an_end_keeps_its_buffer_through_short_reads() {
    // A cloud writing 4 KiB TLS records: every read ends at a record's end, short of the
    // buffer. A watch's reads take them as bursts' ends (a wait without a buffer after
    // each); a list's must not, or its 5 MB come in pieces of 64 and 4,032 bytes.
    let record = 4 * 1024;
    let pieces = || Pieces(std::iter::repeat_n(vec![b'x'; record], 8).collect());
    let sizes = |mut reads: BodyReads| {
        let (mut source, mut traffic, mut sizes) = (pieces(), 0, Vec::new());
        while let Some(chunk) = reads.next(&mut source, &mut traffic).unwrap() {
            sizes.push(chunk.len());
        }
        assert_eq!(traffic, 8 * record as u64);
        (sizes, reads.buf.capacity())
    };
    let (bulk, held) = sizes(BodyReads::bulk());
    assert_eq!(bulk, vec![record; 8], "one read a record, each whole");
    assert_eq!(held, BUFFER, "one buffer to the end");
    let (watch, _) = sizes(BodyReads::watch());
    assert_eq!(watch[..4], [64, record - 64, 64, record - 64]);
}
