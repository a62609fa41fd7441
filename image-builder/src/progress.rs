//! Progress of a build: a line per phase on standard error, or JSON events on standard output (`--json`) for
//! automation: `{"event":"phase","phase":"rootfs","message":"…","elapsedMs":…}`.

use std::time::Instant;

pub struct Progress {
    json: bool,
    started: Instant,
}

impl Progress {
    pub fn new(json: bool) -> Progress {
        Progress {
            json,
            started: Instant::now(),
        }
    }

    pub fn step(&self, phase: &str, message: &str) {
        let elapsed = self.started.elapsed();
        if self.json {
            println!(
                "{}",
                serde_json::json!({"event": "phase", "phase": phase, "message": message, "elapsedMs": elapsed.as_millis() as u64})
            );
        } else {
            eprintln!("[{:>6.1}s] {phase}: {message}", elapsed.as_secs_f64());
        }
    }

    pub fn done(&self, outputs: &[std::path::PathBuf]) {
        let elapsed = self.started.elapsed();
        if self.json {
            println!(
                "{}",
                serde_json::json!({"event": "done", "outputs": outputs, "elapsedMs": elapsed.as_millis() as u64})
            );
        } else {
            for o in outputs {
                eprintln!("[{:>6.1}s] wrote {}", elapsed.as_secs_f64(), o.display());
            }
        }
    }
}
