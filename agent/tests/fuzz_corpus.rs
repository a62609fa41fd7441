//! Replays the fuzzers' saved corpus and every crash they ever found (`fuzz/corpus/<target>/`,
//! `fuzz/regressions/<target>/`) through the agent's fuzzing entry points, on stable: what once crashed stays
//! fixed, and what the corpus reaches keeps working.

use std::path::Path;

#[test]
fn the_fuzz_corpus_and_every_saved_crash_replay_cleanly() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut replayed = 0;
    for (name, target) in foothold_agent::fuzz::TARGETS {
        let mut inputs = 0;
        for dir in ["corpus", "regressions"] {
            let Ok(entries) = std::fs::read_dir(fuzz.join(dir).join(name)) else {
                continue;
            };
            for entry in entries {
                let path = entry.unwrap().path();
                let data = std::fs::read(&path).unwrap();
                let outcome = std::panic::catch_unwind(|| target(&data));
                assert!(outcome.is_ok(), "{name}: {} panics", path.display());
                inputs += 1;
            }
        }
        assert!(inputs > 0, "no saved inputs for fuzz target {name}");
        replayed += inputs;
    }
    println!("replayed {replayed} inputs");
    let _ = std::fs::remove_dir_all(foothold_agent::fuzz::scratch_dir());
}
