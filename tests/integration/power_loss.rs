//! Faults: the hub killed with SIGKILL at random moments while it caches a steady stream of
//! lists and watch events, restarted on the same cache each time. After every restart the
//! cache must hold only whole JSON objects, each a version the cloud really served, none
//! older than before the kill, and no temporary leftovers; at the end, the offline answers
//! must be exactly what is on disk.
//!
//! The schedule (kill delays, mutations) comes from a seeded generator: the seed is printed,
//! and `TINYHUB_POWER_LOSS_SEED` sets it (thread timing still varies from run to run).
//! `TINYHUB_POWER_LOSS_KILLS` sets the number of kills (default 100).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use crate::support::hub::*;
use crate::support::{Cloud, lock};

/// splitmix64: small, seedable, good enough to spread kill moments and pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next() % items.len() as u64) as usize]
    }
}

fn env_number(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{name}={value:?}: {e}")),
    )
}

const POD_NAMESPACES: [&str; 3] = ["pl-a", "pl-b", "pl-c"];
const CM_NAMESPACE: &str = "pl-cfg";
const PODS_DIR: &str = "kubelet/pods.v1.core";
const CMS_DIR: &str = "kubelet/configmaps.v1.core";
const PODS_LIST: &str = "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1";

/// Everything the cloud served, by cache path (relative to the root): each version by its
/// resourceVersion, and which objects the cloud has deleted. The mutator holds the lock
/// across each cloud call, so whatever the hub can have seen is recorded by the time a
/// check takes the lock.
#[derive(Default)]
struct History {
    versions: HashMap<String, HashMap<u64, Value>>,
    /// Deleted objects and the resourceVersion of their deletion.
    deleted: HashMap<String, u64>,
    creates: usize,
    updates: usize,
    deletes: usize,
}

fn rel_path(resource_dir: &str, ns: &str, name: &str) -> String {
    format!("{resource_dir}/{ns}/{name}")
}

/// Where the hub caches kubelet's objects of `resource` (pods or configmaps).
fn kind_dir(resource: &str) -> &'static str {
    if resource == "pods" {
        PODS_DIR
    } else {
        CMS_DIR
    }
}

fn rv_of(v: &Value) -> Option<u64> {
    v["metadata"]["resourceVersion"].as_str()?.parse().ok()
}

/// Padding of a random length, so that a torn or mixed file cannot pass for a whole one.
fn padding(rng: &mut Rng) -> String {
    "x".repeat(rng.range(0, 3000) as usize)
}

/// Creates, updates and deletes pods bound to edge-1 and configmaps, never reusing a name,
/// until `stop`; every version the cloud answers goes into `history`.
fn mutate(cloud: &Cloud, history: &Mutex<History>, stop: &AtomicBool, seed: u64) {
    let mut rng = Rng(seed);
    let mut live: Vec<(&str, String, String)> = Vec::new();
    let mut serial = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let mut h = lock(history);
        let roll = rng.range(0, 99);
        if live.len() < 24 || (roll < 25 && live.len() < 60) {
            serial += 1;
            let (resource, ns, object) = if serial.is_multiple_of(4) {
                let object = json!({
                    "metadata": {"name": format!("cm-{serial}"), "namespace": CM_NAMESPACE},
                    "data": {"gen": "0", "pad": padding(&mut rng)}
                });
                ("configmaps", CM_NAMESPACE, object)
            } else {
                let ns = *rng.pick(&POD_NAMESPACES);
                let object = json!({
                    "metadata": {
                        "name": format!("pod-{serial}"), "namespace": ns,
                        "labels": {"gen": "0"},
                        "annotations": {"pad": padding(&mut rng)}
                    },
                    "spec": {"nodeName": "edge-1", "containers": [{"name": "c", "image": "busybox"}]},
                    "status": {"phase": "Running"}
                });
                ("pods", ns, object)
            };
            let created = cloud.create(resource, object);
            let name = created["metadata"]["name"].as_str().unwrap().to_owned();
            let path = rel_path(kind_dir(resource), ns, &name);
            let rv = rv_of(&created).expect("the cloud sets a resourceVersion");
            h.versions
                .entry(path.clone())
                .or_default()
                .insert(rv, created);
            h.creates += 1;
            live.push((resource, ns.to_owned(), name));
        } else if roll < 85 || live.len() < 30 {
            let (resource, ns, name) = rng.pick(&live).clone();
            let generation = rng.range(1, 1_000_000).to_string();
            let pad = padding(&mut rng);
            let patch = if resource == "pods" {
                json!({"metadata": {"labels": {"gen": generation}, "annotations": {"pad": pad}}})
            } else {
                json!({"data": {"gen": generation, "pad": pad}})
            };
            let updated = cloud.patch(resource, &ns, &name, patch);
            let dir = kind_dir(resource);
            let rv = rv_of(&updated).expect("the cloud sets a resourceVersion");
            h.versions
                .entry(rel_path(dir, &ns, &name))
                .or_default()
                .insert(rv, updated);
            h.updates += 1;
        } else {
            let i = (rng.next() % live.len() as u64) as usize;
            let (resource, ns, name) = live.swap_remove(i);
            let gone = cloud.delete(resource, &ns, &name);
            let dir = kind_dir(resource);
            let rv = rv_of(&gone).expect("a deletion has a resourceVersion");
            h.deleted.insert(rel_path(dir, &ns, &name), rv);
            h.deletes += 1;
        }
        drop(h);
        std::thread::sleep(Duration::from_millis(rng.range(1, 8)));
    }
}

/// One request as a node component sends it, read to its end; gives up quietly when the hub
/// dies under it (that is the point) or when `stop` is set.
fn drive(addr: SocketAddr, path: &str, stop: &AtomicBool) -> bool {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(100)));
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: hub\r\nUser-Agent: {KUBELET}\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
    );
    if s.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut buf = [0u8; 16 * 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if stop.load(Ordering::Relaxed) {
                    return false;
                }
            }
            Err(_) => return false,
        }
    }
}

/// Kubelet-like traffic against one hub process until the hub dies or `stop` is set:
/// relists of its pods and of a configmap namespace, a watch of its pods from now, and one
/// resumed from `resume_rv` after `resume_late`, as a client reconnecting after the restart
/// does: it replays events the cache has already seen, which must not take any object
/// back, not even one the other watch or a relist has removed meanwhile.
fn start_clients(
    hub: &Hub,
    cloud: &Cloud,
    resume_rv: u64,
    resume_late: Duration,
    stop: &Arc<AtomicBool>,
) -> Vec<JoinHandle<()>> {
    let addr = hub.proxy;
    let lister = {
        let stop = Arc::clone(stop);
        std::thread::spawn(move || {
            let cms = format!("/api/v1/namespaces/{CM_NAMESPACE}/configmaps");
            while !stop.load(Ordering::Relaxed) {
                if !drive(addr, PODS_LIST, &stop) || !drive(addr, &cms, &stop) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(15));
            }
        })
    };
    let watch = |rv: u64, late: Duration| {
        let stop = Arc::clone(stop);
        let path = format!("{PODS_LIST}&watch=true&resourceVersion={rv}&timeoutSeconds=60");
        std::thread::spawn(move || {
            std::thread::sleep(late);
            drive(addr, &path, &stop);
        })
    };
    vec![
        lister,
        watch(cloud.resource_version(), Duration::ZERO),
        watch(resume_rv, resume_late),
    ]
}

/// What the checks remember from one round to the next.
#[derive(Default)]
struct Ledger {
    /// The highest resourceVersion seen at a check, by path.
    max_rv: HashMap<String, u64>,
    /// Objects the cloud had deleted and the cache no longer held at a check, whose
    /// deletion is older than any watch of the following rounds starts from: they must
    /// never come back.
    gone: HashSet<String>,
    /// The oldest resourceVersion a watch of the following rounds starts from.
    replay_floor: u64,
    /// Where the resumed watch of the round being checked started.
    resumed_from: u64,
    /// Content of every object file at the last check.
    last: BTreeMap<String, Value>,
}

/// Figures of one check.
#[derive(Debug, Default)]
struct Checked {
    files: usize,
    objects: usize,
    changed: usize,
}

/// Every regular file under `root` by relative path (but the running hub's lock file), and
/// every dot-name anywhere.
fn walk(root: &Path, rel: &str, files: &mut Vec<String>, dot_names: &mut Vec<String>) {
    let dir = if rel.is_empty() {
        root.to_owned()
    } else {
        root.join(rel)
    };
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry"))
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name().into_string().expect("UTF-8 names");
        if rel.is_empty() && name == LOCK_FILE {
            // The running hub's lock, not a cache entry nor a leftover.
            continue;
        }
        let path = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        if name.starts_with('.') {
            dot_names.push(path.clone());
        }
        let kind = entry.file_type().expect("a file type");
        if kind.is_dir() {
            walk(root, &path, files, dot_names);
        } else {
            assert!(kind.is_file(), "{path}: not a regular file");
            files.push(path);
        }
    }
}

/// What the store leaves for start-up recovery (see src/cache/store/journal.rs): anything in the
/// staging directory `.staging` (staged objects, journals being written, collections being
/// deleted), complete journals `.journal.<n>` in the root, and any other dot-name but the
/// `.synced` record. After
/// recovery there is none of it, though the (empty) staging directory stays.
fn leftovers(root: &Path) -> Vec<String> {
    let (mut files, mut dots) = (Vec::new(), Vec::new());
    walk(root, "", &mut files, &mut dots);
    // `.synced` is a record the writer keeps (written at once when a kind is first listed
    // whole), not a temporary file.
    dots.retain(|d| d != ".staging" && d != ".synced");
    dots.extend(files.into_iter().filter(|f| f.starts_with(".staging/")));
    dots
}

/// Checks (a) to (d) of the cache at `root`; `what` names the moment for messages.
fn check_cache(root: &Path, history: &Mutex<History>, ledger: &mut Ledger, what: &str) -> Checked {
    // Holding the history pauses the mutator: everything the hub can have read is in it.
    let h = lock(history);
    // (c) No temporary leftovers.
    assert_eq!(
        leftovers(root),
        Vec::<String>::new(),
        "{what}: temporary leftovers after start-up"
    );
    assert!(
        root.join(".staging").is_dir(),
        "{what}: no staging directory"
    );
    let (mut files, mut dots) = (Vec::new(), Vec::new());
    walk(root, "", &mut files, &mut dots);
    let mut checked = Checked::default();
    let mut present = BTreeMap::new();
    for rel in &files {
        checked.files += 1;
        let bytes = std::fs::read(root.join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"));
        // (a) One whole JSON object.
        let object: Map<String, Value> = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            panic!(
                "{what}: {rel} is not a whole JSON object ({e}): {:?}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
            )
        });
        let object = Value::Object(object);
        let Some(rv) = rv_of(&object) else {
            continue;
        };
        // (b) Never older than at the last check, and never back from the dead.
        assert!(
            !ledger.gone.contains(rel),
            "{what}: {rel} (resourceVersion {rv}) is back after its deletion had reached the cache"
        );
        if let Some(&before) = ledger.max_rv.get(rel) {
            assert!(
                rv >= before,
                "{what}: {rel} went back from resourceVersion {before} to {rv} (served \
                 {:?}, deleted at {:?}; the round's resumed watch from {}, its other \
                 traffic from {})",
                {
                    let mut served: Vec<_> = h
                        .versions
                        .get(rel)
                        .into_iter()
                        .flat_map(|v| v.keys())
                        .collect();
                    served.sort();
                    served
                },
                h.deleted.get(rel),
                ledger.resumed_from,
                ledger.replay_floor,
            );
        }
        ledger.max_rv.insert(rel.clone(), rv);
        // (d) A version the cloud served, whole: not torn, not mixed.
        if rel.starts_with(PODS_DIR) || rel.starts_with(CMS_DIR) {
            checked.objects += 1;
            let served = h.versions.get(rel).and_then(|v| v.get(&rv));
            assert_eq!(
                Some(&object),
                served,
                "{what}: {rel} at resourceVersion {rv} is not what the cloud served"
            );
            if ledger.last.get(rel) != Some(&object) {
                checked.changed += 1;
            }
            present.insert(rel.clone(), object);
        }
    }
    for (rel, &deleted_at) in &h.deleted {
        if deleted_at <= ledger.replay_floor && !present.contains_key(rel) {
            ledger.gone.insert(rel.clone());
        }
    }
    checked.changed += ledger
        .last
        .keys()
        .filter(|k| !present.contains_key(*k))
        .count();
    ledger.last = present;
    checked
}

/// The `cache recovered ...` figures the hub logged at start-up (0 when it logged none).
fn recovery(hub: &Hub) -> [u64; 3] {
    let logs = hub.logs();
    let Some(line) = logs
        .lines()
        .find(|l| l.contains("cache recovered after an interrupted write"))
    else {
        return [0; 3];
    };
    let field = |name: &str| -> u64 {
        line.split(&format!("{name}="))
            .nth(1)
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {line:?}"))
    };
    [
        field("rolled_forward"),
        field("rolled_back"),
        field("removed_temp_files"),
    ]
}

fn by_path(items: &[Value], dir: &str) -> BTreeMap<String, Value> {
    items
        .iter()
        .map(|item| {
            let ns = item["metadata"]["namespace"].as_str().unwrap();
            let name = item["metadata"]["name"].as_str().unwrap();
            (rel_path(dir, ns, name), item.clone())
        })
        .collect()
}

#[test]
fn sigkill_at_random_moments_loses_nothing_and_leaves_no_leftovers() {
    let seed = env_number("TINYHUB_POWER_LOSS_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    let kills = env_number("TINYHUB_POWER_LOSS_KILLS").unwrap_or(100) as usize;
    eprintln!("power loss: seed {seed} (TINYHUB_POWER_LOSS_SEED={seed} replays the schedule)");
    let mut rng = Rng(seed);
    let started = Instant::now();

    let cloud = Arc::new(Cloud::start());
    let dir = TempDir::new("power-loss");
    let spec = HubSpec::for_cloud(&cloud, dir.path());
    let root = spec.cache_dir.clone();
    let history = Arc::new(Mutex::new(History::default()));
    let stop_mutator = Arc::new(AtomicBool::new(false));
    let mut mutator = Some({
        let (cloud, history, stop) = (
            Arc::clone(&cloud),
            Arc::clone(&history),
            Arc::clone(&stop_mutator),
        );
        let seed = rng.next();
        std::thread::spawn(move || mutate(&cloud, &history, &stop, seed))
    });

    let mut ledger = Ledger::default();
    let mut hub = Hub::start(&spec);
    let mut resume_rv = cloud.resource_version();
    let mut restarts = Vec::with_capacity(kills);
    let (mut rounds_changed, mut most_objects, mut files_checked) = (0, 0, 0);
    // Rounds whose kill left something for recovery to do, and what it did.
    let (mut left_behind, mut recovered) = (0, [0u64; 3]);
    for round in 1..=kills {
        let stop_clients = Arc::new(AtomicBool::new(false));
        // The next round's resumed watch starts where this round's traffic starts.
        ledger.replay_floor = cloud.resource_version();
        ledger.resumed_from = resume_rv;
        let run = Duration::from_millis(rng.range(20, 400));
        // Every other round the resumed watch comes just before the kill, as on a slow
        // (emulated) hub: its replay then meets deletions the other traffic applied first,
        // and the kill lands before it reaches them.
        let resume_late = if round % 2 == 0 {
            run.saturating_sub(Duration::from_millis(10))
        } else {
            Duration::ZERO
        };
        let clients = start_clients(&hub, &cloud, resume_rv, resume_late, &stop_clients);
        resume_rv = ledger.replay_floor;
        std::thread::sleep(run);
        hub.kill9();
        stop_clients.store(true, Ordering::Relaxed);
        for client in clients {
            client.join().expect("a client thread");
        }
        if !leftovers(&root).is_empty() {
            left_behind += 1;
        }
        if round == kills {
            // The last restart is offline: the cloud is gone, the hub answers from what was
            // committed.
            stop_mutator.store(true, Ordering::Relaxed);
            if let Some(mutator) = mutator.take() {
                mutator.join().expect("the mutator thread");
            }
            cloud.stop();
        }
        let restart = Instant::now();
        hub = Hub::start(&spec);
        restarts.push(restart.elapsed());
        assert!(
            !hub.logs().contains("cannot open the cache"),
            "round {round}: {}",
            hub.logs()
        );
        let r = recovery(&hub);
        for (sum, n) in recovered.iter_mut().zip(r) {
            *sum += n;
        }
        // Checked at once: the hub has no client yet, and its own list of yurt-hub-cfg
        // (absent from this cloud) stages nothing.
        let what = format!("seed {seed}, round {round} (killed after {run:?})");
        let checked = check_cache(&root, &history, &mut ledger, &what);
        files_checked += checked.files;
        most_objects = most_objects.max(checked.objects);
        if checked.changed > 0 {
            rounds_changed += 1;
        }
    }
    assert!(
        hub.wait_healthy(&cloud, false, Duration::from_secs(15)),
        "{}",
        hub.logs()
    );
    let what = format!("seed {seed}, offline after the last kill");
    let on_disk = &ledger.last;
    assert!(!on_disk.is_empty(), "nothing was cached");
    for (url, dir) in [
        (PODS_LIST.to_owned(), PODS_DIR),
        (
            format!("/api/v1/namespaces/{CM_NAMESPACE}/configmaps"),
            CMS_DIR,
        ),
    ] {
        let list = get(&format!("{}{url}", hub.url()), KUBELET);
        assert_eq!(list.status, 200, "{url}: {}", list.text());
        let list = list.json();
        let answered = by_path(list["items"].as_array().unwrap(), dir);
        let stored: BTreeMap<String, Value> = on_disk
            .iter()
            .filter(|(path, _)| path.starts_with(dir))
            .map(|(p, v)| (p.clone(), v.clone()))
            .collect();
        assert_eq!(
            answered.keys().collect::<Vec<_>>(),
            stored.keys().collect::<Vec<_>>(),
            "{what}: offline list of {url}"
        );
        assert_eq!(answered, stored, "{what}: offline list of {url}");
        let highest = stored.values().filter_map(rv_of).max().unwrap_or(0);
        assert_eq!(
            list["metadata"]["resourceVersion"],
            highest.to_string(),
            "{what}: {url}"
        );
    }
    // Gets of the first, a middle and the last object answer the file's content.
    let paths: Vec<&String> = on_disk.keys().collect();
    for path in [paths[0], paths[paths.len() / 2], paths[paths.len() - 1]] {
        let [_, kind, ns, name] = path.split('/').collect::<Vec<_>>()[..] else {
            panic!("{path}: not component/kind/namespace/name");
        };
        let resource = kind.split('.').next().unwrap();
        let r = get(
            &format!("{}/api/v1/namespaces/{ns}/{resource}/{name}", hub.url()),
            KUBELET,
        );
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        assert_eq!(&r.json(), &on_disk[path], "{what}: offline get of {path}");
    }

    let h = lock(&history);
    restarts.sort();
    let (elapsed, median, slowest) = (
        started.elapsed(),
        restarts[restarts.len() / 2],
        restarts[restarts.len() - 1],
    );
    let per_round = files_checked / kills;
    let [forward, back, removed] = recovered;
    eprintln!(
        "power loss: seed {seed}: {kills} kills survived in {elapsed:?}; restarts median \
         {median:?}, slowest {slowest:?}; {files_checked} files checked ({per_round} a round, \
         up to {most_objects} objects), the cache changed in {rounds_changed} rounds; kills \
         that left temporary files or journals: {left_behind}; recovery rolled forward \
         {forward}, rolled back {back}, removed {removed} leftovers; cloud: {} creates, {} \
         updates, {} deletes",
        h.creates, h.updates, h.deletes,
    );
    // The kills landed while the cache was moving, or the test proved nothing.
    assert!(
        rounds_changed * 2 >= kills,
        "the cache changed in only {rounds_changed} of {kills} rounds"
    );
}
