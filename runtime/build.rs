//! Compiles the one piece of the C ABI written in C: arithmetic on C's `long double` (80-bit
//! x87 on x86-64, binary128 on Linux on aarch64, a `double` on Apple silicon), which Rust has
//! no type for.

fn main() {
    println!("cargo:rerun-if-changed=src/capi/long_double.c");
    cc::Build::new().file("src/capi/long_double.c").warnings(true).compile("mpr_long_double");
}
