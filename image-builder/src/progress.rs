//! Progress of a build. On a terminal: a spinner naming the running phase and its elapsed time, and a byte bar per
//! download (indicatif), above which each finished step is printed. Elsewhere (logs, CI): a line per step on
//! standard error. With `--json`: events on standard output for automation —
//! `{"event":"phase","phase":"rootfs","message":"…","elapsedMs":…}`, then `{"event":"done",…}`. When the
//! reader of those events goes away (a closed pipe), the build goes on: the outputs are the job, the events a
//! report of it. The loss is said once on standard error.

use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

pub struct Progress {
    json: bool,
    /// Where `--json` events go (standard output); `None` once a write to it has failed.
    events: Mutex<Option<Box<dyn Write + Send>>>,
    started: Instant,
    /// Bars, when standard error is a terminal and not `--json`.
    multi: Option<MultiProgress>,
    phase: Mutex<Option<ProgressBar>>,
}

/// A download's byte bar (nothing when bars are off).
pub struct Bytes(Option<ProgressBar>);

impl Bytes {
    /// No bar.
    pub fn none() -> Bytes {
        Bytes(None)
    }

    pub fn inc(&self, n: u64) {
        if let Some(b) = &self.0 {
            b.inc(n);
        }
    }

    /// Bytes already on disk when a download resumes.
    pub fn set_position(&self, n: u64) {
        if let Some(b) = &self.0 {
            b.set_position(n);
        }
    }
}

impl Drop for Bytes {
    fn drop(&mut self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}

impl Progress {
    pub fn new(json: bool) -> Progress {
        Progress::with_events(json, Box::new(std::io::stdout()))
    }

    /// Like `new`, with `--json` events written to `events`.
    pub fn with_events(json: bool, events: Box<dyn Write + Send>) -> Progress {
        let target = ProgressDrawTarget::stderr();
        let multi = (!json && !target.is_hidden()).then(|| MultiProgress::with_draw_target(target));
        Progress {
            json,
            events: Mutex::new(Some(events)),
            started: Instant::now(),
            multi,
            phase: Mutex::new(None),
        }
    }

    /// What fetching one input did: an `input` event (`field`, `input`, `outcome`, for an input built from source
    /// its build `record`, and `message` for a reader), or a line with the message.
    pub fn input(
        &self,
        field: &str,
        input: &str,
        outcome: &str,
        record: Option<serde_json::Value>,
        message: &str,
    ) {
        if self.json {
            let elapsed = self.started.elapsed();
            self.event(&serde_json::json!({"event": "input", "field": field, "input": input, "outcome": outcome,
                "record": record, "message": message, "elapsedMs": elapsed.as_millis() as u64}));
            return;
        }
        self.step("fetch", &format!("{input} ({field}): {message}"));
    }

    pub fn step(&self, phase: &str, message: &str) {
        let elapsed = self.started.elapsed();
        if self.json {
            self.event(&serde_json::json!({"event": "phase", "phase": phase, "message": message, "elapsedMs": elapsed.as_millis() as u64}));
            return;
        }
        let line = format!("[{:>6.1}s] {phase}: {message}", elapsed.as_secs_f64());
        let Some(multi) = &self.multi else {
            eprintln!("{line}");
            return;
        };
        let _ = multi.println(&line);
        let mut current = self.phase.lock().unwrap_or_else(|p| p.into_inner());
        let bar = current.get_or_insert_with(|| {
            let b = multi.add(ProgressBar::new_spinner());
            b.set_style(
                ProgressStyle::with_template("{spinner} {prefix:.bold} {wide_msg} {elapsed}")
                    .expect("a valid template"),
            );
            b.enable_steady_tick(Duration::from_millis(120));
            b
        });
        if bar.prefix() != phase {
            bar.reset_elapsed();
        }
        bar.set_prefix(phase.to_owned());
        bar.set_message(message.to_owned());
    }

    /// A byte bar for a download of `total` bytes (when known).
    pub fn bytes(&self, label: &str, total: Option<u64>) -> Bytes {
        let Some(multi) = &self.multi else {
            return Bytes(None);
        };
        let b = multi.add(match total {
            Some(t) => ProgressBar::new(t),
            None => ProgressBar::no_length(),
        });
        b.set_style(
            ProgressStyle::with_template(
                "  {msg:40!} {bar:30} {bytes:>10}/{total_bytes:<10} {bytes_per_sec:>12} {eta}",
            )
            .expect("a valid template"),
        );
        b.set_message(label.to_owned());
        Bytes(Some(b))
    }

    pub fn done(&self, outputs: &[std::path::PathBuf]) {
        let elapsed = self.started.elapsed();
        if let Some(b) = self.phase.lock().unwrap_or_else(|p| p.into_inner()).take() {
            b.finish_and_clear();
        }
        if self.json {
            self.event(&serde_json::json!({"event": "done", "outputs": outputs, "elapsedMs": elapsed.as_millis() as u64}));
        } else {
            for o in outputs {
                eprintln!("[{:>6.1}s] wrote {}", elapsed.as_secs_f64(), o.display());
            }
        }
    }

    /// One `--json` event: a line, flushed, so a reader sees each phase as it starts.
    fn event(&self, event: &serde_json::Value) {
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        let Some(out) = events.as_mut() else {
            return;
        };
        if let Err(e) = writeln!(out, "{event}").and_then(|()| out.flush()) {
            *events = None;
            eprintln!(
                "foothold-build: the --json events can no longer be written ({e}); the build goes on"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A reader that goes away after `left` writes, as a pipe whose reader exited.
    struct Closing {
        lines: Arc<Mutex<Vec<u8>>>,
        left: usize,
    }

    impl Write for Closing {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.left == 0 {
                return Err(std::io::ErrorKind::BrokenPipe.into());
            }
            self.lines.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            self.left = self.left.saturating_sub(1);
            Ok(())
        }
    }

    #[test]
    fn json_events_are_lines_and_a_closed_reader_does_not_stop_the_build() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let p = Progress::with_events(
            true,
            Box::new(Closing {
                lines: lines.clone(),
                left: 2,
            }),
        );
        p.step("rootfs", "mmdebstrap");
        p.step("partition", "ext4");
        // The reader is gone: neither these nor `done` panic, and nothing more is written.
        p.step("qcow2", "convert");
        p.step("iso", "xorriso");
        p.done(&[std::path::PathBuf::from("/out/lab.raw")]);
        assert!(p.events.lock().unwrap().is_none());
        let text = String::from_utf8(lines.lock().unwrap().clone()).unwrap();
        let events: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(events.len(), 2, "{text}");
        assert_eq!(events[0]["event"], "phase");
        assert_eq!(events[0]["phase"], "rootfs");
        assert_eq!(events[1]["phase"], "partition");
        assert!(events[1]["elapsedMs"].is_u64());
    }

    #[test]
    fn done_names_the_outputs() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let p = Progress::with_events(
            true,
            Box::new(Closing {
                lines: lines.clone(),
                left: usize::MAX,
            }),
        );
        p.done(&[std::path::PathBuf::from("/out/lab.raw")]);
        let text = String::from_utf8(lines.lock().unwrap().clone()).unwrap();
        let done: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
        assert_eq!(done["event"], "done");
        assert_eq!(done["outputs"], serde_json::json!(["/out/lab.raw"]));
    }
}
