// An invocation without programs.
popcorn::program! {}

fn main() {}
