#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    popcorn_test_support::fuzz::data_file(data, popcorn_io::Format::Csv)
});
