//! Replays the fuzz corpus: every input under `fuzz/seeds/<target>`, `fuzz/corpus/<target>`
//! and `fuzz/regressions/<target>` goes through the same `tinyhub::fuzzing` function as the
//! `cargo fuzz` target, so what the fuzzer found (and the bugs it found) stay tested without
//! nightly or libFuzzer. Built only with the `fuzzing` feature (`make test` enables it: `cargo
//! test --all-targets --features fuzzing`). See fuzz/README.md.

use std::fs;
use std::panic;
use std::path::{Path, PathBuf};

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("reading a corpus directory").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Runs every input of `target`; fails listing each input that panics, and fails when the
/// seeds or the corpus are missing, so a lost corpus cannot pass vacuously.
fn replay(target: &str, run: fn(&[u8])) {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut failed = Vec::new();
    for kind in ["seeds", "corpus", "regressions"] {
        let files = inputs(&fuzz.join(kind).join(target));
        assert!(
            kind == "regressions" || !files.is_empty(),
            "fuzz/{kind}/{target} is empty or missing"
        );
        for file in files {
            let data = fs::read(&file).expect("reading a corpus file");
            if panic::catch_unwind(|| run(&data)).is_err() {
                failed.push(file.display().to_string());
            }
        }
    }
    assert!(failed.is_empty(), "{target} panicked on: {failed:#?}");
}

#[test]
fn request_head_corpus() {
    replay("request_head", tinyhub::fuzzing::request_head);
}

#[test]
fn selectors_corpus() {
    replay("selectors", tinyhub::fuzzing::selectors);
}

#[test]
fn body_decoder_corpus() {
    replay("body_decoder", tinyhub::fuzzing::body_decoder);
}

#[test]
fn archive_corpus() {
    replay("archive", tinyhub::fuzzing::archive);
}
