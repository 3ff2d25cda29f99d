//! Link options of the `hapctl` binary.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    // When the process starts, the loader reads the whole relocation table to write every
    // pointer of the binary's constant tables, and the table's pages stay mapped. Packed
    // (DT_RELR) it is a small fraction of that size; the binary then needs GNU ld 2.38 to link
    // and glibc 2.36 to run, both in Debian 12.
    if var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu" {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
