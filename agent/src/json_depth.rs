//! A cap on how deeply JSON from clients may nest. Manifests nest four levels (manifest, descriptor list,
//! descriptor, annotations) and the REST API's metadata two; serde_json's own guard is 128 levels of
//! recursion. The cap is checked by one pass over the bytes before any parser sees them, so a hostile
//! document costs a scan, never a deep recursion or a tree of allocations.

/// Levels of arrays and objects a client's JSON may open.
pub const MAX_JSON_DEPTH: usize = 32;

/// Whether `json` opens more than `max` arrays and objects at once. Brackets inside strings (escapes
/// included) do not count; malformed JSON is left for the parser to reject.
pub fn exceeds(json: &[u8], max: usize) -> bool {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in json {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn nested(n: usize) -> String {
        format!("{}{}", "[".repeat(n), "]".repeat(n))
    }

    #[test]
    fn counts_arrays_and_objects() {
        assert!(!exceeds(nested(32).as_bytes(), 32));
        assert!(exceeds(nested(33).as_bytes(), 32));
        assert!(!exceeds(br#"{"a":{"b":[1,{"c":2}]}}"#, 4));
        assert!(exceeds(br#"{"a":{"b":[1,{"c":{}}]}}"#, 4));
        // Closed levels free their depth.
        let siblings = format!("[{}]", vec![nested(31); 100].join(","));
        assert!(!exceeds(siblings.as_bytes(), 32));
    }

    #[test]
    fn brackets_in_strings_do_not_count() {
        let s = format!(r#"{{"k": "{}"}}"#, "[{".repeat(100));
        assert!(!exceeds(s.as_bytes(), 2));
        // An escaped quote does not end the string; an escaped backslash before a quote does.
        assert!(!exceeds(br#"["\"[[[[", 1]"#, 1));
        assert!(exceeds(br#"["\\", [[1]]]"#, 2));
    }

    proptest! {
        /// Agrees with serde_json on every document it can parse: the deepest value's depth decides.
        #[test]
        fn agrees_with_serde(depth in 0usize..60, max in 0usize..40, key in "[a-z\\[\\]{}\"\\\\]{0,6}") {
            let mut doc = serde_json::Value::String(key);
            for i in 0..depth {
                doc = if i % 2 == 0 {
                    serde_json::Value::Array(vec![doc])
                } else {
                    serde_json::json!({ "k": doc })
                };
            }
            let text = serde_json::to_vec(&doc).unwrap();
            prop_assert_eq!(exceeds(&text, max), depth > max);
        }
    }
}
