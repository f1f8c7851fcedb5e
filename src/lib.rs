//! tinyhub: a node-local Kubernetes API proxy for edge gateways. Node components talk to it
//! on loopback; it forwards to the cloud apiserver, persists what they read, and answers from
//! that cache while the cloud is unreachable. See ARCHITECTURE.md for the code map.

// Unsafe code is limited to what has no safe std equivalent (sigwait, syncfs, the counting
// global allocator, the netlink socket of the dummy interface, the open-file limit); each is allowed locally with a SAFETY comment.
#![deny(unsafe_code)]
// The library serves the binary, the benches and the fuzz targets: what they do not use is
// crate-private, and a `pub` that nothing outside can reach is flagged.
#![warn(unreachable_pub)]

pub mod alloc;
pub mod app;
mod atomic_file;
mod cache;
pub mod cachectl;
#[cfg(test)]
mod child_test;
mod clients;
mod cloud_error;
pub mod config;
mod dir_lock;
pub mod error;
mod filters;
// Only for tests and the fuzz crate (the `fuzzing` feature): not in the library the binary links.
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod hashing;
mod health;
pub(crate) mod heartbeat;
mod http1;
mod link;
mod linkbook;
pub mod logging;
mod metrics;
mod mode;
mod names;
mod netif;
mod offline;
mod overlay;
mod pki;
mod pool;
mod procfs;
mod protobuf;
mod proxy;
mod reaper;
mod request;
mod requester;
mod rlimit;
mod route;
mod selector;
mod serve;
mod server;
mod signals;
mod status;
mod stream;
mod thread_dump;
mod tls;
mod tokens;
mod tunnel;
mod upstream;
mod watchcache;
mod x509;

/// Stack of the hub's own threads (request threads, health checkers, the writer). Measured:
/// a TLS handshake with ring plus JSON decoding stays well under it; see BENCHMARKS.md.
pub(crate) const SMALL_STACK: usize = 256 * 1024;

/// Locks `m`, also after a panic elsewhere poisoned it: the hub's shared state is plain values
/// that stay usable, and one failed thread must not stop the others.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Starts a named thread with [`SMALL_STACK`]; a failure says which thread.
pub(crate) fn spawn<F>(name: &str, f: F) -> Result<std::thread::JoinHandle<()>, error::StartupError>
where
    F: FnOnce() + Send + 'static,
{
    std::thread::Builder::new()
        .name(name.into())
        .stack_size(SMALL_STACK)
        .spawn(f)
        .map_err(|e| {
            error::StartupError::new(e.to_string())
                .context(format!("cannot start the {name} thread"))
        })
}

/// Seconds since the Unix epoch by the system clock (0 before it): the one reading of
/// wall-clock seconds for expiries (read grants, cached tokens) and notes.
pub(crate) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// [`unix_now`] unsigned: the cache's sync times and ages (0 before the epoch).
pub(crate) fn unix_secs() -> u64 {
    u64::try_from(unix_now()).unwrap_or(0)
}

/// A number in `low..=high`, different for calls in the same instant (no crate for this:
/// spreading watch lengths needs no quality): the offline watch hold, the pool
/// caches' watches and their feeders.
pub(crate) fn random_between(low: u64, high: u64) -> u64 {
    static SEQUENCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mut x = u64::from(nanos)
        ^ SEQUENCE
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    // splitmix64's finaliser.
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    low + x % (high.saturating_sub(low) + 1)
}

/// `s.split(sep as char)` for an ASCII `sep`, each cut found by memchr: str's split sets up
/// a char searcher and, built into the hub at opt-level z, cost twice as much on a path.
pub(crate) fn split_ascii(s: &str, sep: u8) -> impl Iterator<Item = &str> {
    debug_assert!(
        sep.is_ascii(),
        "a cut at a non-ASCII byte could split a character"
    );
    let mut rest = Some(s);
    std::iter::from_fn(move || {
        let s = rest?;
        match memchr::memchr(sep, s.as_bytes()) {
            Some(i) => {
                // An ASCII byte: both sides of it are character boundaries.
                rest = Some(&s[i + 1..]);
                Some(&s[..i])
            }
            None => {
                rest = None;
                Some(s)
            }
        }
    })
}

/// `a.eq_ignore_ascii_case(b)`, eight bytes at a time: header names and tokens are compared
/// dozens of times per request, and std's byte loop, built into the hub at opt-level z,
/// took about twenty instructions a byte.
pub(crate) fn eq_ignore_ascii_case(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let ((words_a, rest_a), (words_b, rest_b)) = (a.as_chunks::<8>(), b.as_chunks::<8>());
    words_a.iter().zip(words_b).all(|(x, y)| {
        lowercase_word(u64::from_le_bytes(*x)) == lowercase_word(u64::from_le_bytes(*y))
    }) && rest_a
        .iter()
        .zip(rest_b)
        .all(|(x, y)| x.eq_ignore_ascii_case(y))
}

/// Each byte of `w` lowercased when it is an ASCII capital, the others as they are.
fn lowercase_word(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = ONES * 0x80;
    // Per byte, on its low seven bits (no carry reaches the next byte): the high bit set
    // when it is at least 'A', and when it is past 'Z'.
    let low = w & !HIGH;
    let from_a = low + ONES * (0x80 - b'A' as u64);
    let past_z = low + ONES * (0x80 - b'Z' as u64 - 1);
    // A capital: from 'A', not past 'Z', and no high bit of its own (no ASCII then).
    let capitals = from_a & !past_z & !w & HIGH;
    w | (capitals >> 2)
}

#[cfg(test)]
mod ascii_tests {
    use super::eq_ignore_ascii_case;

    #[test]
    fn eight_at_a_time_agrees_with_std() {
        // The letters' neighbours in ASCII ('@' '[' '`' '{'), multi-byte characters, and
        // lengths across the eight-byte words.
        let alphabet = [
            'A', 'Z', 'a', 'z', '@', '[', '`', '{', '-', '0', 'é', 'É', 'ſ', 'k',
        ];
        let mut seed = 7u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as usize
        };
        for _ in 0..20_000 {
            let len = next() % 20;
            let a: String = (0..len)
                .map(|_| alphabet[next() % alphabet.len()])
                .collect();
            // Its twin, each character maybe swapped for its other case or another one.
            let b: String = a
                .chars()
                .map(|c| match next() % 4 {
                    0 => c.to_ascii_uppercase(),
                    1 => c.to_ascii_lowercase(),
                    2 => alphabet[next() % alphabet.len()],
                    _ => c,
                })
                .collect();
            assert_eq!(
                eq_ignore_ascii_case(&a, &b),
                a.eq_ignore_ascii_case(&b),
                "{a:?} {b:?}"
            );
        }
        assert!(eq_ignore_ascii_case(
            "Content-Length-And-More",
            "content-length-and-more"
        ));
        assert!(!eq_ignore_ascii_case("content-lengtH@", "content-length`"));
    }

    #[test]
    fn split_ascii_cuts_as_str_split_does() {
        for s in [
            "",
            "/",
            "//",
            "a",
            "/api/v1/namespaces/é/pods/",
            "a//b/",
            "é/ſ/",
        ] {
            let ours: Vec<&str> = super::split_ascii(s, b'/').collect();
            let std: Vec<&str> = s.split('/').collect();
            assert_eq!(ours, std, "{s:?}");
        }
    }
}
