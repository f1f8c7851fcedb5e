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

use crate::procfs::{Units, parse_stat};

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

/// Writes the dump to `<dir>/tinyhub.<pid>.threads.log` (0600; `dir` is made 0700 when
/// missing: it is the root dir, which holds the hub's keys); returns its path and how many
/// threads it describes. An error names the path that failed.
pub(crate) fn write(dir: &Path) -> io::Result<(PathBuf, usize)> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let tasks = read_tasks()?;
    let text = render(std::process::id(), &tasks, Units::of_this_system());
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(naming(dir))?;
    let path = dir.join(format!("tinyhub.{}.threads.log", std::process::id()));
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(naming(&path))?;
    Ok((path, tasks.len()))
}

/// Puts `path` in front of an I/O error's message.
fn naming(path: &Path) -> impl Fn(io::Error) -> io::Error + '_ {
    move |e| io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// Every thread of this process, by tid. A thread that ends while it is read is left out.
fn read_tasks() -> io::Result<Vec<Task>> {
    let task_dir = Path::new("/proc/self/task");
    let mut tasks = Vec::new();
    for entry in fs::read_dir(task_dir).map_err(naming(task_dir))? {
        let entry = entry.map_err(naming(task_dir))?;
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
/// CPU times are `?` when the clock tick is not known.
fn render(pid: u32, tasks: &[Task], units: Option<Units>) -> String {
    let mut out = format!(
        "tinyhub {} pid {pid}: {} threads (name, state, kernel wait channel, CPU seconds user/system)\n",
        env!("CARGO_PKG_VERSION"),
        tasks.len()
    );
    for task in tasks {
        let stat = parse_stat(&task.stat);
        let (name, state) = stat
            .as_ref()
            .map_or(("", ""), |s| (s.name.as_str(), s.state.as_str()));
        let cpu = match stat.as_ref().zip(units) {
            Some((s, u)) => format!("{:.2}/{:.2}", u.seconds(s.utime), u.seconds(s.stime)),
            None => "?/?".to_owned(),
        };
        let wchan = match task.wchan.trim() {
            "" | "0" => "-",
            w => w,
        };
        let _ = writeln!(
            out,
            "tid {} {name:?} state={state} wchan={wchan} cpu={cpu}",
            task.tid,
        );
        for frame in task.stack.lines() {
            let _ = writeln!(out, "    {frame}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let units = Units {
            ticks_per_second: 100,
            page_bytes: 4096,
        };
        let text = render(10, &tasks, Some(units));
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
        let unknown = render(10, &tasks[1..], None);
        assert!(unknown.ends_with("cpu=?/?\n"), "{unknown}");
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

    #[test]
    fn a_missing_dir_is_made_private_and_a_failure_names_the_path() {
        use std::os::unix::fs::PermissionsExt;
        let base = std::env::temp_dir().join(format!("tinyhub-dump-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        let dir = base.join("root");
        let (path, threads) = write(&dir).unwrap();
        assert!(threads >= 1);
        assert_eq!(path.parent(), Some(dir.as_path()));
        let mode = fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        // A file where the directory should be: the error says which path.
        let blocked = base.join("file");
        fs::write(&blocked, "x").unwrap();
        let e = write(&blocked).unwrap_err();
        assert!(
            e.to_string().contains(&blocked.display().to_string()),
            "{e}"
        );
        fs::remove_dir_all(&base).unwrap();
    }
}
