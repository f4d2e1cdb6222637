//! The decision service benchmark (written below).

fn main() {}
