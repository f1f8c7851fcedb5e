//! Tests that must run in a process of their own (a new network namespace, a file size
//! limit): the test binary runs one of its own ignored tests as a child. The integration
//! tests include this file too (tests/support/namespace.rs), so both kinds re-run alike.

use std::ffi::OsStr;
use std::process::{Command, Output};

/// Runs the ignored test `name` of module `module` (its `module_path!()`) in a child process
/// of this test binary, started through `wrap` (a program and its arguments that then run the
/// binary, e.g. a shell that lowers a limit; empty: none), with `env` set. Asserts the child
/// test passed; its stderr.
pub(crate) fn run(module: &str, name: &str, wrap: &[&str], env: (&str, &OsStr)) -> String {
    // `module_path!()` starts with the crate's name, which test filters leave out.
    let module = module.split_once("::").map_or(module, |(_, rest)| rest);
    assert_passed(&output(&format!("{module}::{name}"), wrap, env))
}

/// What the child running the ignored test `test` (its full name without the crate's, as
/// `--exact` wants it) gave, started as [`run`] starts it.
pub(crate) fn output(test: &str, wrap: &[&str], env: (&str, &OsStr)) -> Output {
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
    command
        .args([
            "--exact",
            test,
            "--ignored",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(env.0, env.1)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {:?} and this test binary: {e}", wrap))
}

/// Asserts that the child's one test passed; its stderr.
pub(crate) fn assert_passed(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}\n{stderr}"
    );
    stderr
}
