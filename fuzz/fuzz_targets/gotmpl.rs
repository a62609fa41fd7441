#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| foothold_agent::fuzz::gotmpl(data));
