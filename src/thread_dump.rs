//! SIGUSR1's dump of the hub's threads, where YurtHub dumps its goroutine stacks
//! (`pkg/yurthub/util/dumpstack.go`, to `<root-dir>/yurthub.<pid>.stacks.log`). Rust cannot
//! walk another thread's stack without unwinding machinery the binary does not carry, so the
//! dump is what the kernel shows of each thread in `/proc/self/task`: its name (every hub
//! thread is named), its state, the kernel function it sleeps in, its CPU time, and its
//! kernel stack where that is readable (root). Enough to see which thread is stuck where,
//! or spinning. Written to `<root-dir>/tinyhub.<pid>.threads.log`.

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// What the kernel says of one thread.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Task {
    tid: u32,
    /// The contents of `stat`.
    stat: String,
    /// `wchan`: the kernel function a sleeping thread waits in; empty when unknown.
    wchan: String,
    /// `stack`: the kernel stack, readable by root only; empty otherwise.
    stack: String,
}

/// Writes the dump to `<dir>/tinyhub.<pid>.threads.log` (0600); returns its path and how
/// many threads it describes.
pub(crate) fn write(dir: &Path) -> io::Result<(PathBuf, usize)> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tasks = read_tasks()?;
    let text = render(std::process::id(), &tasks);
    fs::create_dir_all(dir)?;
    let path = dir.join(format!("tinyhub.{}.threads.log", std::process::id()));
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)?
        .write_all(text.as_bytes())?;
    Ok((path, tasks.len()))
}

/// Every thread of this process, by tid. A thread that ends while it is read is left out.
fn read_tasks() -> io::Result<Vec<Task>> {
    let mut tasks = Vec::new();
    for entry in fs::read_dir("/proc/self/task")? {
        let entry = entry?;
        let Some(tid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let dir = entry.path();
        let Ok(stat) = fs::read_to_string(dir.join("stat")) else {
            continue;
        };
        let read = |name: &str| fs::read_to_string(dir.join(name)).unwrap_or_default();
        tasks.push(Task {
            tid,
            stat,
            wchan: read("wchan"),
            stack: read("stack"),
        });
    }
    tasks.sort_by_key(|t| t.tid);
    Ok(tasks)
}

/// The dump's text: a header, then a line per thread (its kernel stack indented below it).
fn render(pid: u32, tasks: &[Task]) -> String {
    let mut out = format!(
        "tinyhub {} pid {pid}: {} threads (name, state, kernel wait channel, CPU seconds user/system)\n",
        env!("CARGO_PKG_VERSION"),
        tasks.len()
    );
    for task in tasks {
        let (name, state, user, system) = parse_stat(&task.stat).unwrap_or_default();
        let wchan = match task.wchan.trim() {
            "" | "0" => "-",
            w => w,
        };
        let _ = writeln!(
            out,
            "tid {} {name:?} state={state} wchan={wchan} cpu={:.2}/{:.2}",
            task.tid,
            seconds(user),
            seconds(system)
        );
        for frame in task.stack.lines() {
            let _ = writeln!(out, "    {frame}");
        }
    }
    out
}

/// Name, state letter and user/system CPU time in clock ticks from a `stat` line
/// (`tid (name) S ppid …`, proc(5)); the name may hold spaces and parentheses, so the fields
/// are counted after its last `)`.
fn parse_stat(stat: &str) -> Option<(String, String, u64, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?.to_owned();
    // Fields from the 3rd (state) on; utime and stime are the 14th and 15th.
    let rest: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
    let state = (*rest.first()?).to_owned();
    let user = rest.get(11)?.parse().ok()?;
    let system = rest.get(12)?.parse().ok()?;
    Some((name, state, user, system))
}

/// Clock ticks as seconds: Linux reports `stat` times in USER_HZ, 100 on every architecture
/// the hub is built for.
fn seconds(ticks: u64) -> f64 {
    ticks as f64 / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_with_a_name_holding_parentheses_is_read() {
        let stat = "4242 (cache (w) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 7 0 99 1000 50";
        assert_eq!(
            parse_stat(stat),
            Some(("cache (w) x".to_owned(), "S".to_owned(), 250, 75))
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn the_dump_names_every_thread_with_its_state_and_stack() {
        let tasks = [
            Task {
                tid: 10,
                stat: "10 (tinyhub) S 1 10 10 0 -1 0 0 0 0 0 12 3 0 0 20 0 2 0 1 1 1".into(),
                wchan: "do_sigtimedwait".into(),
                stack: "[<0>] do_sigtimedwait+0x1/0x2\n[<0>] ret_from_fork+0x3/0x4\n".into(),
            },
            Task {
                tid: 11,
                stat: "11 (cache-writer) R 1 10 10 0 -1 0 0 0 0 0 500 0 0 0 20 0 2 0 1 1 1".into(),
                wchan: "0".into(),
                stack: String::new(),
            },
        ];
        let text = render(10, &tasks);
        assert_eq!(
            text.lines().collect::<Vec<_>>(),
            [
                &*format!(
                    "tinyhub {} pid 10: 2 threads (name, state, kernel wait channel, CPU seconds user/system)",
                    env!("CARGO_PKG_VERSION")
                ),
                "tid 10 \"tinyhub\" state=S wchan=do_sigtimedwait cpu=0.12/0.03",
                "    [<0>] do_sigtimedwait+0x1/0x2",
                "    [<0>] ret_from_fork+0x3/0x4",
                "tid 11 \"cache-writer\" state=R wchan=- cpu=5.00/0.00",
            ]
        );
    }

    #[test]
    fn the_running_process_is_read_from_proc() {
        let tasks = read_tasks().unwrap();
        let me = tasks
            .iter()
            .find(|t| t.tid == std::process::id())
            .expect("the main thread");
        assert!(parse_stat(&me.stat).is_some(), "{}", me.stat);
    }
}
