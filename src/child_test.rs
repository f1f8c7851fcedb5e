//! Tests that must run in a process of their own (a new network namespace, a file size
//! limit): the test binary runs one of its own ignored tests as a child.

use std::ffi::OsStr;
use std::process::Command;

/// Runs the ignored test `name` of module `module` (its `module_path!()`) in a child process
/// of this test binary, started through `wrap` (a program and its arguments that then run the
/// binary, e.g. a shell that lowers a limit; empty: none), with `env` set. Asserts the child
/// test passed; its stderr.
pub(crate) fn run(module: &str, name: &str, wrap: &[&str], env: (&str, &OsStr)) -> String {
    // `module_path!()` starts with the crate's name, which test filters leave out.
    let module = module.split_once("::").map_or(module, |(_, rest)| rest);
    let test = format!("{module}::{name}");
    // The test binary is running: its path exists.
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut command = match wrap.split_first() {
        Some((program, args)) => {
            let mut command = Command::new(program);
            command.args(args).arg(&exe);
            command
        }
        None => Command::new(&exe),
    };
    let out = command
        .args([
            "--exact",
            &test,
            "--ignored",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(env.0, env.1)
        .output()
        .expect("the test binary runs again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}\n{stderr}"
    );
    stderr
}
