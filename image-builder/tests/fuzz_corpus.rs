//! Replays the spec fuzzer's saved corpus and crashes (`fuzz/corpus/spec/`, `fuzz/regressions/spec/`) on
//! stable through `spec::fuzz`.

use std::path::Path;

#[test]
fn the_spec_fuzz_corpus_replays_cleanly() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut inputs = 0;
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(fuzz.join(dir).join("spec")) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            let outcome = std::panic::catch_unwind(|| foothold_image_builder::spec::fuzz(&data));
            assert!(outcome.is_ok(), "{} panics", path.display());
            inputs += 1;
        }
    }
    assert!(inputs > 0, "no saved inputs for the spec fuzz target");
}
