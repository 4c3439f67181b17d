#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| popcorn_test_support::fuzz::program_text(data));
