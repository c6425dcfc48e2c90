//! Builds the C client and the C feed follower in `tests/c/` against `prescient.h`, the
//! header that `prescient-shim`'s build script generates, and links them into this
//! package, so the system tests can run them against a real `prescient-dpu` process and
//! a real feed log.

fn main() {
    let include =
        std::env::var("DEP_PRESCIENT_SHIM_INCLUDE").expect("prescient-shim's build script exports its include folder");
    cc::Build::new()
        .file("tests/c/client.c")
        .file("tests/c/feed_follower.c")
        .include(&include)
        .flag_if_supported("-std=c11")
        .warnings_into_errors(true)
        .flag("-Wall")
        .flag("-Wextra")
        .compile("prescient_c_client");
    println!("cargo:rerun-if-changed=tests/c/client.c");
    println!("cargo:rerun-if-changed=tests/c/feed_follower.c");
}
