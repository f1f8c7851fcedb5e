//! Figures from raw measurements: latency percentiles from sorted samples, throughput runs
//! with N client threads over a fixed time (alternating direct and hub, round by round), and
//! the formatting of durations, rates and sizes for the tables.
//!
//! It knows nothing about HTTP or the hub: an operation is a closure that does one request
//! and says how many bytes it moved.

use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Latency samples of one series (direct or hub).
#[derive(Default, Clone)]
pub struct Samples(Vec<Duration>);

impl Samples {
    /// Records one sample.
    pub fn push(&mut self, d: Duration) {
        self.0.push(d);
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The `q` quantile (0 < q ≤ 1) by the nearest-rank method over the sorted samples.
    pub fn quantile(&self, q: f64) -> Duration {
        let mut sorted = self.0.clone();
        sorted.sort_unstable();
        nearest_rank(&sorted, q)
    }

    /// Median.
    pub fn p50(&self) -> Duration {
        self.quantile(0.50)
    }

    /// 99th percentile.
    pub fn p99(&self) -> Duration {
        self.quantile(0.99)
    }

    /// Arithmetic mean.
    pub fn mean(&self) -> Duration {
        if self.0.is_empty() {
            return Duration::ZERO;
        }
        self.0.iter().sum::<Duration>() / self.0.len() as u32
    }
}

/// The nearest-rank quantile of sorted values: the smallest value with at least `q` of the
/// samples at or below it.
fn nearest_rank(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// One operation of a throughput run: a request, returning the body bytes it received.
pub type Op = Box<dyn FnMut() -> Result<u64, String> + Send>;

/// What a throughput run measured.
#[derive(Clone, Copy, Default)]
pub struct Rate {
    /// Operations completed.
    pub ops: u64,
    /// Body bytes received.
    pub bytes: u64,
    /// Wall time from the start signal to the end of the last operation.
    pub elapsed: Duration,
}

impl Rate {
    /// Operations per second.
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Megabytes (10^6) per second.
    pub fn mb_per_sec(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Sums two runs (rounds of the same series).
    pub fn add(self, other: Rate) -> Rate {
        Rate {
            ops: self.ops + other.ops,
            bytes: self.bytes + other.bytes,
            elapsed: self.elapsed + other.elapsed,
        }
    }
}

struct Go {
    start: Instant,
    end: Instant,
}

struct Done {
    ops: u64,
    bytes: u64,
    last: Instant,
    error: Option<String>,
}

/// N client threads that each run their own operation in a loop when told to. The threads
/// stay between rounds, so connections (and TLS sessions) are set up once, outside the
/// timed windows.
pub struct Pool {
    workers: Vec<(mpsc::Sender<Go>, mpsc::Receiver<Done>, JoinHandle<()>)>,
}

impl Pool {
    /// Starts one thread per operation.
    pub fn new(ops: Vec<Op>) -> Pool {
        let workers = ops
            .into_iter()
            .map(|mut op| {
                let (go_tx, go_rx) = mpsc::channel::<Go>();
                let (done_tx, done_rx) = mpsc::channel::<Done>();
                let handle = thread::spawn(move || {
                    for go in go_rx {
                        let now = Instant::now();
                        if go.start > now {
                            thread::sleep(go.start - now);
                        }
                        let mut done = Done {
                            ops: 0,
                            bytes: 0,
                            last: Instant::now(),
                            error: None,
                        };
                        while Instant::now() < go.end {
                            match op() {
                                Ok(bytes) => {
                                    done.ops += 1;
                                    done.bytes += bytes;
                                    done.last = Instant::now();
                                }
                                Err(e) => {
                                    done.error = Some(e);
                                    break;
                                }
                            }
                        }
                        if done_tx.send(done).is_err() {
                            return;
                        }
                    }
                });
                (go_tx, done_rx, handle)
            })
            .collect();
        Pool { workers }
    }

    /// Runs every thread for `duration` from a common start and sums what they did.
    pub fn run(&self, duration: Duration) -> Result<Rate, String> {
        // A short lead lets every thread be waiting on the clock when the window opens.
        let start = Instant::now() + Duration::from_millis(20);
        let end = start + duration;
        for (go, _, _) in &self.workers {
            go.send(Go { start, end })
                .map_err(|_| "a client thread ended early".to_owned())?;
        }
        let mut rate = Rate::default();
        let mut last = start;
        // An operation is bounded by the client's own timeout; allow for that past the end.
        let patience = duration + Duration::from_secs(90);
        for (_, done, _) in &self.workers {
            let d = done
                .recv_timeout(patience)
                .map_err(|_| "a client thread did not finish its round in time".to_owned())?;
            if let Some(e) = d.error {
                return Err(e);
            }
            rate.ops += d.ops;
            rate.bytes += d.bytes;
            last = last.max(d.last);
        }
        rate.elapsed = last.saturating_duration_since(start).max(duration / 2);
        Ok(rate)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for (go, done, handle) in self.workers.drain(..) {
            drop(go);
            drop(done);
            let _ = handle.join();
        }
    }
}

/// Runs `rounds` rounds of `duration` on each pool, alternating direct and hub (ABAB...).
pub fn alternate(
    direct: &Pool,
    hub: &Pool,
    rounds: usize,
    duration: Duration,
) -> Result<(Rate, Rate), String> {
    let (mut d, mut h) = (Rate::default(), Rate::default());
    for _ in 0..rounds {
        d = d.add(direct.run(duration).map_err(|e| format!("direct: {e}"))?);
        h = h.add(
            hub.run(duration)
                .map_err(|e| format!("through the hub: {e}"))?,
        );
    }
    Ok((d, h))
}

/// A duration for a table: µs below 10 ms, else ms.
pub fn dur(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 10_000.0 {
        format!("{us:.0} µs")
    } else {
        format!("{:.1} ms", us / 1000.0)
    }
}

/// A ratio with two decimals.
pub fn ratio(hub: f64, direct: f64) -> String {
    if direct <= 0.0 {
        return "n/a".into();
    }
    format!("{:.2}", hub / direct)
}

/// A size in KiB or MiB (binary units, as /proc reports memory).
pub fn size(bytes: u64) -> String {
    let kib = bytes as f64 / 1024.0;
    if kib < 1024.0 {
        format!("{kib:.0} KiB")
    } else {
        format!("{:.2} MiB", kib / 1024.0)
    }
}

/// A count with thousands separators.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
