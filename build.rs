//! Records the target triple so `tinyhub --version` can say what it was built for, and links
//! the Linux builds (the gateways' static musl ones of cross/cross.mk, the host's) with the
//! functions an idle hub runs first in the text (cross/idle-text.ld, written by `make
//! idle-text`; see cross/idle-text.py).
fn main() {
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".to_owned());
    println!("cargo:rustc-env=TINYHUB_TARGET={target}");
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".to_owned());
        let script = format!("{dir}/cross/idle-text.ld");
        println!("cargo:rerun-if-changed={script}");
        println!("cargo:rustc-link-arg-bins=-Wl,-T,{script}");
    }
}
