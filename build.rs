//! Records the target triple so `tinyhub --version` can say what it was built for.
fn main() {
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".to_owned());
    println!("cargo:rustc-env=TINYHUB_TARGET={target}");
    println!("cargo:rerun-if-changed=build.rs");
}
