//! Case 8 (issue 15): how long the hub takes to call a dead cloud unhealthy when its health
//! check is the renewal of the node lease, with YurtHub's default heartbeat flags.
//!
//! An idle hub (no client requests) can only find the death at its next tick, plus the
//! probe's own length: its backoff against a refused cloud, its timeouts against a black hole.
//! A client request that fails in transport wakes a probe at once. Each way is timed from the
//! moment the cloud stops answering to the hub's health series reading 0, then from the
//! cloud's return to 1 again. Every wait has a deadline; the figures are reported, never
//! asserted.

use std::hash::{BuildHasher, RandomState};
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use crate::client::{Client, metrics, wait_until};
use crate::report::{Report, Section, Table};
use crate::stats::Samples;
use crate::support::Cloud;
use crate::support::hub::{Hub, KUBELET, health_series};
use crate::{Bench, Running};

/// The node whose lease the hub renews (the launcher's `--node-name`).
const NODE: &str = "edge-1";
/// What kubelet reads through the hub in the round with a request.
const NODE_PATH: &str = "/api/v1/nodes/edge-1";
/// The sleeps of one lease GET backoff, 200 + 400 + 800 ms (YurtHub's
/// `pkg/yurthub/healthchecker/cloudapiserver`).
const BACKOFF: Duration = Duration::from_millis(1400);
/// GETs in one backoff: one before each sleep and one after the last.
const BACKOFF_GETS: u32 = 4;
/// Allowed over an expected bound for the metric's polling and the machine's load.
const SLACK: Duration = Duration::from_millis(500);
/// How often the health series is read while timing.
const POLL: Duration = Duration::from_millis(10);
/// Extra time every wait gets beyond its expected bound before it is a failure.
const MARGIN: Duration = Duration::from_secs(20);
/// What the hub logs when a failed request wakes a probe (src/health.rs).
const WOKEN: &str = "a request to the cloud server failed: probing it now";

/// The heartbeat flags a case-8 hub runs with.
#[derive(Clone, Copy)]
struct Beat {
    /// `--heartbeat-interval-seconds`: the tick.
    interval: Duration,
    /// `--heartbeat-timeout-seconds`: one request's limit.
    timeout: Duration,
    /// `--heartbeat-failed-retry`: PUTs per probe.
    retry: u32,
    /// `--heartbeat-healthy-threshold`: successful probes in a row to be healthy again.
    threshold: u32,
}

impl Beat {
    /// YurtHub's defaults; in `--quick` a 1 s interval and timeout so the smoke run stays short.
    fn for_scale(quick: bool) -> Beat {
        let secs = if quick { (1, 1) } else { (10, 2) };
        Beat {
            interval: Duration::from_secs(secs.0),
            timeout: Duration::from_secs(secs.1),
            retry: 3,
            threshold: 2,
        }
    }

    /// The flags, given after the launcher's fast ones so that they win.
    fn flags(&self) -> Vec<String> {
        vec![
            format!("--heartbeat-interval-seconds={}", self.interval.as_secs()),
            format!("--heartbeat-timeout-seconds={}", self.timeout.as_secs()),
            format!("--heartbeat-failed-retry={}", self.retry),
            format!("--heartbeat-healthy-threshold={}", self.threshold),
        ]
    }

    /// One probe against a refused cloud: every request fails at once, the backoff sleeps.
    fn refused_probe(&self) -> Duration {
        BACKOFF
    }

    /// One probe against a black hole: every PUT and GET waits out its timeout.
    fn blackholed_probe(&self) -> Duration {
        self.timeout * (self.retry + BACKOFF_GETS) + BACKOFF
    }

    /// The `/readyz` probe a failed request wakes, against a black hole: a healthy server
    /// gets 1 + `--heartbeat-failed-retry` tries (a refused cloud fails them at once).
    fn woken_blackholed(&self) -> Duration {
        self.timeout * (1 + self.retry)
    }

    /// The threshold's successes, one per tick, the first at the next tick.
    fn recovery(&self) -> Duration {
        self.interval * self.threshold
    }
}

/// How the cloud dies in a round, and whether a client asks for something right after.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    /// The cloud stops: connections are refused, open ones are cut.
    Refused,
    /// The cloud black-holes: connections are accepted and never answered.
    Blackholed,
    /// The cloud stops and kubelet reads its Node through the hub at once.
    RefusedWithRequest,
}

impl Way {
    /// Label in the table.
    fn label(self) -> &'static str {
        match self {
            Way::Refused => "refused, idle",
            Way::Blackholed => "black-holed, idle",
            Way::RefusedWithRequest => "refused, with a request",
        }
    }

    /// The longest the hub should take to call the cloud unhealthy.
    fn expected(self, beat: &Beat) -> Duration {
        match self {
            Way::Refused => beat.interval + beat.refused_probe(),
            Way::Blackholed => beat.interval + beat.blackholed_probe(),
            // The woken `/readyz` tries are refused at once.
            Way::RefusedWithRequest => Duration::ZERO,
        }
    }
}

/// The cloud made unreachable in one way; brought back by [`Dead::revive`], or on drop if a
/// wait failed first, so that nothing after this case meets a dead cloud.
struct Dead<'a> {
    /// The cloud killed.
    cloud: &'a Cloud,
    /// How it was killed, hence how to revive it.
    way: Way,
    /// Revived already.
    alive: bool,
}

impl<'a> Dead<'a> {
    /// Kills `cloud` the `way` says.
    fn kill(cloud: &'a Cloud, way: Way) -> Dead<'a> {
        match way {
            Way::Refused | Way::RefusedWithRequest => cloud.stop(),
            Way::Blackholed => cloud.set_blackhole(true),
        }
        Dead {
            cloud,
            way,
            alive: false,
        }
    }

    /// Brings the cloud back.
    fn revive(&mut self) {
        if self.alive {
            return;
        }
        self.alive = true;
        match self.way {
            Way::Refused | Way::RefusedWithRequest => self.cloud.restart(),
            Way::Blackholed => self.cloud.set_blackhole(false),
        }
    }
}

impl Drop for Dead<'_> {
    fn drop(&mut self) {
        self.revive();
    }
}

/// One round's figures.
struct Round {
    way: Way,
    /// From the cloud's death to the health series reading 0.
    down: Duration,
    /// From the cloud's return to the series reading 1.
    up: Duration,
    /// The client request's outcome, in the round with one.
    request: Option<String>,
    /// A failed request (the client's, or the hub's own watch) woke a probe before the verdict.
    woken: bool,
}

/// Everything the case measured.
struct Measured {
    rounds: Vec<Round>,
    /// Lease writes the cloud answered with success while the case ran.
    renewals: usize,
    /// The case's time with the cloud reachable (the renewals' window).
    reachable: Duration,
    /// The hub's health transitions, from its log.
    transitions: Vec<String>,
}

/// Case 8: the time from the cloud's death to the hub's "unhealthy", idle (the periodic
/// probe alone) and with a kubelet request that wakes the probe, on a hub of its own with
/// YurtHub's default heartbeat flags; and the time back to healthy once the cloud returns.
pub fn death_to_unhealthy(b: &Bench, dir: &Path, report: &mut Report) -> Result<(), String> {
    let beat = Beat::for_scale(b.scale.quick);
    // The lease's owner: without the Node the hub would stop renewing (issue 15).
    if b.cloud.node_uid(NODE).is_none() {
        b.cloud.node(NODE, None, &[]);
    }
    let uid = b
        .cloud
        .node_uid(NODE)
        .ok_or_else(|| format!("the cloud has no Node {NODE} after creating it"))?;
    b.cloud.set_record_requests(true);
    let measured = measure(b, dir, &beat, &uid);
    b.cloud.set_record_requests(false);
    b.cloud.reset_requests();
    let m = measured?;
    println!("  the hub's health log:");
    for line in &m.transitions {
        println!("    {line}");
    }
    write_section(&m, &beat, b.scale.heartbeat_rounds, report);
    Ok(())
}

/// Starts the hub, waits until it renews the lease, and runs the rounds.
fn measure(b: &Bench, dir: &Path, beat: &Beat, uid: &str) -> Result<Measured, String> {
    let flags = beat.flags();
    let hub = b.start_hub_with(dir, &flags.iter().map(String::as_str).collect::<Vec<_>>());
    let started = Instant::now();
    let owned = |lease: &serde_json::Value| lease["metadata"]["ownerReferences"][0]["uid"] == uid;
    wait_until(
        beat.recovery() + beat.blackholed_probe() + MARGIN,
        &format!("the cloud to hold the hub's lease of {NODE}, owned by its Node"),
        || Ok(b.cloud.lease(NODE).is_some_and(|l| owned(&l))),
    )
    .map_err(|e| format!("{e}; the hub's log ends:\n{}", log_tail(&hub)))?;
    health(&hub, b.cloud, true, started, beat.recovery() + MARGIN)?;

    let mut rounds = Vec::new();
    let mut dead_for = Duration::ZERO;
    let mut seed = 0;
    let mut run = |way: Way, rounds: &mut Vec<Round>| -> Result<(), String> {
        seed += 1;
        let round = one_round(b, &hub, beat, way, seed)?;
        println!(
            "  {}: unhealthy after {:.2} s{}, healthy again {:.2} s after the cloud's return{}",
            way.label(),
            round.down.as_secs_f64(),
            if round.woken { " (a probe woken)" } else { "" },
            round.up.as_secs_f64(),
            round
                .request
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        );
        dead_for += round.down;
        rounds.push(round);
        Ok(())
    };
    for _ in 0..b.scale.heartbeat_rounds {
        run(Way::Refused, &mut rounds)?;
        run(Way::Blackholed, &mut rounds)?;
    }
    // Kubelet read its Node once while the cloud was up, as it does at start: the request
    // after the death is one the hub can also answer from its cache.
    Client::plain(&hub.url(), KUBELET)
        .get(NODE_PATH)
        .map_err(|e| format!("kubelet's read of its Node before the outage: {e}"))?;
    run(Way::RefusedWithRequest, &mut rounds)?;
    let total = started.elapsed();

    let renewals = b
        .cloud
        .lease_writes("tinyhub/")
        .iter()
        .filter(|r| r.status.is_some_and(|s| (200..300).contains(&s)))
        .count();
    let transitions = hub
        .logs()
        .lines()
        .filter(|l| l.contains("cloud server is") || l.contains("probing it now"))
        .map(str::to_owned)
        .collect();
    Ok(Measured {
        rounds,
        renewals,
        reachable: total.saturating_sub(dead_for),
        transitions,
    })
}

/// One round: waits a random part of an interval (so the death falls anywhere between two
/// ticks), kills the cloud, times the hub's verdict, brings the cloud back and times the
/// hub's recovery.
fn one_round(b: &Bench, hub: &Running, beat: &Beat, way: Way, seed: u64) -> Result<Round, String> {
    thread::sleep(beat.interval.mul_f64(random_fraction(seed)));
    let wakes = hub.log_lines(|l| l.contains(WOKEN));
    let died = Instant::now();
    let mut dead = Dead::kill(b.cloud, way);
    let request = (way == Way::RefusedWithRequest).then(|| {
        let url = hub.url();
        thread::spawn(move || {
            let t = Instant::now();
            let answer = Client::plain(&url, KUBELET).get(NODE_PATH);
            (t.elapsed(), answer)
        })
    });
    let down = health(hub, b.cloud, false, died, way.expected(beat) + MARGIN)?;
    let woken = hub.log_lines(|l| l.contains(WOKEN)) > wakes;
    let request = match request {
        Some(r) => {
            let (took, answer) = r
                .join()
                .map_err(|_| "the thread of kubelet's request panicked".to_owned())?;
            Some(match answer {
                Ok(bytes) => format!(
                    "kubelet's GET of its Node answered 200 ({bytes} bytes) in {:.0} ms",
                    took.as_secs_f64() * 1e3
                ),
                Err(e) => format!(
                    "kubelet's GET of its Node failed in {:.0} ms: {e}",
                    took.as_secs_f64() * 1e3
                ),
            })
        }
        None => None,
    };
    dead.revive();
    let back = Instant::now();
    let up = health(
        hub,
        b.cloud,
        true,
        back,
        beat.recovery() + beat.blackholed_probe() + MARGIN,
    )?;
    Ok(Round {
        way,
        down,
        up,
        request,
        woken,
    })
}

/// Polls the hub's health series of `cloud` until it reads `up`; the time since `since`.
fn health(
    hub: &Hub,
    cloud: &Cloud,
    up: bool,
    since: Instant,
    limit: Duration,
) -> Result<Duration, String> {
    let series = health_series(cloud);
    let want = if up { 1.0 } else { 0.0 };
    loop {
        if metrics(hub)?.find(&series) == Some(want) {
            return Ok(since.elapsed());
        }
        if since.elapsed() > limit {
            return Err(format!(
                "the hub did not call the cloud {} within {limit:?}; its log ends:\n{}",
                if up { "healthy" } else { "unhealthy" },
                log_tail(hub)
            ));
        }
        thread::sleep(POLL);
    }
}

/// The last lines of the hub's log, for a failure message.
fn log_tail(hub: &Hub) -> String {
    let logs = hub.logs();
    let lines: Vec<&str> = logs.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// A fraction in [0, 1), different per run and per `seed` (the process's random hash keys).
fn random_fraction(seed: u64) -> f64 {
    let bits = RandomState::new().hash_one(seed) >> 11;
    bits as f64 / (1u64 << 53) as f64
}

/// Seconds with two decimals.
fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// Seconds with one decimal, for bounds.
fn bound(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// The section and the targets.
fn write_section(m: &Measured, beat: &Beat, rounds: usize, report: &mut Report) {
    let mut section = Section::new(
        "8. Heartbeat: from the cloud's death to \"unhealthy\"",
        &format!(
            "A hub of its own in edge mode, its health check the renewal of the node lease \
             `kube-node-lease/{NODE}` through the cloud, with YurtHub's heartbeat flags \
             (`--heartbeat-interval-seconds={}`, `--heartbeat-timeout-seconds={}`, \
             `--heartbeat-failed-retry={}`, `--heartbeat-healthy-threshold={}`). Idle (no \
             client request), {rounds} round(s) each: after a random part of an interval (so \
             the death falls anywhere between two ticks) the cloud stops (connections refused, \
             open ones cut) or black-holes (connections accepted, nothing answered); the time \
             runs until the hub's `node_yurthub_server_healthy_status` reads 0 (read every \
             10 ms), then from the cloud's return until it reads 1. Last, one round where \
             kubelet reads its Node through the hub right after the cloud stops: the request \
             fails in transport and wakes a `/readyz` probe (a lease write per failed request \
             would load etcd for nothing).",
            beat.interval.as_secs(),
            beat.timeout.as_secs(),
            beat.retry,
            beat.threshold
        ),
    );
    let mut table = Table::new(
        "Seconds",
        &[
            "way",
            "rounds",
            "to unhealthy, median",
            "to unhealthy, max",
            "expected",
            "back to healthy, median",
            "back to healthy, max",
        ],
    );
    let ways = [Way::Refused, Way::Blackholed, Way::RefusedWithRequest];
    let mut figures = Vec::new();
    for way in ways {
        let (mut down, mut up) = (Samples::default(), Samples::default());
        for r in m.rounds.iter().filter(|r| r.way == way) {
            down.push(r.down);
            up.push(r.up);
        }
        if down.len() == 0 {
            continue;
        }
        let expected = way.expected(beat);
        table.row(vec![
            way.label().into(),
            down.len().to_string(),
            secs(down.p50()),
            secs(down.quantile(1.0)),
            if way == Way::RefusedWithRequest {
                format!("≈ {}", bound(expected))
            } else {
                format!("≤ {}", bound(expected))
            },
            secs(up.p50()),
            secs(up.quantile(1.0)),
        ]);
        figures.push((way, down, up));
    }
    section.tables.push(table);
    section.notes.push(format!(
        "Expected from the flags: idle, up to one interval until the next tick plus the probe: \
         ≤ {} refused ({} s + the GET backoff's {}), ≤ {} black-holed (+ {} PUTs and {} GETs \
         of {} s each + {}); with a request a `/readyz` probe starts at once (1 + {} tries): \
         ≈ 0 s refused, ≤ {} black-holed. Back to healthy: {} successful probes one tick apart, the first at the \
         next tick: ≤ {} after the cloud answers again.",
        bound(Way::Refused.expected(beat)),
        beat.interval.as_secs(),
        bound(BACKOFF),
        bound(Way::Blackholed.expected(beat)),
        beat.retry,
        BACKOFF_GETS,
        beat.timeout.as_secs(),
        bound(BACKOFF),
        beat.retry,
        bound(beat.woken_blackholed()),
        beat.threshold,
        bound(beat.recovery())
    ));
    let each: Vec<String> = ways
        .iter()
        .map(|way| {
            let rs: Vec<String> = m
                .rounds
                .iter()
                .filter(|r| r.way == *way)
                .map(|r| format!("{:.2}/{:.2}", r.down.as_secs_f64(), r.up.as_secs_f64()))
                .collect();
            format!("{}: {}", way.label(), rs.join(", "))
        })
        .collect();
    section.notes.push(format!(
        "Each round, seconds to unhealthy / back to healthy: {}.",
        each.join("; ")
    ));
    if let Some(r) = m.rounds.iter().find_map(|r| r.request.as_deref()) {
        section
            .notes
            .push(format!("In the round with a request, {r}."));
    }
    let quick_back = m.rounds.iter().filter(|r| r.up < beat.interval).count();
    if quick_back > 0 {
        section.notes.push(format!(
            "{quick_back} of the {} rounds were healthy again less than one interval after the \
             cloud's return, though the threshold asks {} successful probes: they ran closer \
             than one tick apart. After a probe longer than the interval the overdue tick runs \
             at once (as Go's ticker would), and a probe woken by a request that failed during \
             the outage, while a tick's probe was under way, runs after that probe's verdict \
             and its success counts too.",
            m.rounds.len(),
            beat.threshold
        ));
    }
    let idle: Vec<&Round> = m
        .rounds
        .iter()
        .filter(|r| r.way != Way::RefusedWithRequest)
        .collect();
    section.notes.push(format!(
        "In {} of the {} idle rounds a failed request asked for a probe before the verdict \
         (the client sends none: the hub's own watches of Services and of \
         `kube-system/yurt-hub-cfg` re-dial the dead cloud); it shortens the time only when \
         it comes before the next tick's probe starts.",
        idle.iter().filter(|r| r.woken).count(),
        idle.len()
    ));
    section.notes.push(format!(
        "The cloud answered {} lease writes of the hub over the case's {:.0} s with the cloud \
         reachable ({:.0} ticks; the start-up renewal and the probes towards the threshold \
         count too). The hub logged {} health transitions and woken probes.",
        m.renewals,
        m.reachable.as_secs_f64(),
        m.reachable.as_secs_f64() / beat.interval.as_secs_f64(),
        m.transitions.len()
    ));
    report.sections.push(section);

    for (way, down, _) in &figures {
        let expected = way.expected(beat);
        let max = down.quantile(1.0);
        report.target(
            &format!("Heartbeat: cloud {} → unhealthy", way.label()),
            &if *way == Way::RefusedWithRequest {
                format!("≈ {} (a woken `/readyz`){}", bound(expected), tolerance())
            } else {
                format!(
                    "≤ {} (one interval + the probe){}",
                    bound(expected),
                    tolerance()
                )
            },
            format!(
                "max {} (median {}, {} round(s))",
                secs(max),
                secs(down.p50()),
                down.len()
            ),
            max <= expected + SLACK,
        );
    }
    let mut up_all = Samples::default();
    for r in &m.rounds {
        up_all.push(r.up);
    }
    report.target(
        "Heartbeat: cloud back → healthy",
        &format!(
            "≤ {} ({} probes one interval apart){}",
            bound(beat.recovery()),
            beat.threshold,
            tolerance()
        ),
        format!(
            "max {} (median {}, {} round(s))",
            secs(up_all.quantile(1.0)),
            secs(up_all.p50()),
            up_all.len()
        ),
        up_all.quantile(1.0) <= beat.recovery() + SLACK,
    );
}

/// How a goal states [`SLACK`], so that a figure just over the bound is met in plain sight.
fn tolerance() -> String {
    format!(", +{} s for polling and load", SLACK.as_secs_f64())
}
