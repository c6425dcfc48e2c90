//! The `prescient-dpu` command.
fn main() {}
