//! Documents users write into Secrets and ConfigMaps (static users, flavors, networkData): JSON or YAML, read
//! one way.

use serde::de::DeserializeOwned;

/// `text` as JSON, else as YAML; the YAML parser's error when it is neither.
pub fn json_or_yaml<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    match serde_json::from_str(text) {
        Ok(v) => Ok(v),
        Err(_) => serde_saphyr::from_str(text).map_err(|e| e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_yaml_and_neither() {
        let j: Vec<u32> = json_or_yaml("[1, 2]").unwrap();
        let y: Vec<u32> = json_or_yaml("- 1\n- 2\n").unwrap();
        assert_eq!(j, y);
        assert!(json_or_yaml::<Vec<u32>>("- a\n").is_err());
    }
}
