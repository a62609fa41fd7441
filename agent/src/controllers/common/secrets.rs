//! Reading Secrets the way every reconciler does: a key's value as text, or an error that names the Secret
//! and the key (a missing Secret or key is the user's to fix, so it goes into a condition, not a retry).

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

/// Key `key` of the Secret `ns/name` (`secret`, as observed): UTF-8 text, or why not.
pub fn value(secret: Option<&Secret>, ns: &str, name: &str, key: &str) -> Result<String, String> {
    let secret = secret.ok_or_else(|| format!("Secret {ns}/{name} not found"))?;
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .ok_or_else(|| format!("Secret {ns}/{name} has no key {key}"))?;
    String::from_utf8(bytes.0.clone())
        .map_err(|_| format!("Secret {ns}/{name} key {key} is not UTF-8"))
}

/// Reads key `key` of the Secret `ns/name`: `Ok(Err(why))` when the Secret or the key is missing, `Err` only
/// when the apiserver fails.
pub async fn read(
    client: &kube::Client,
    ns: &str,
    name: &str,
    key: &str,
) -> Result<Result<String, String>, kube::Error> {
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await?;
    Ok(value(secret.as_ref(), ns, name, key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    #[test]
    fn a_value_or_an_error_naming_the_secret_and_key() {
        let s = Secret {
            data: Some(
                [
                    ("users".to_owned(), ByteString(b"- a".to_vec())),
                    ("bin".to_owned(), ByteString(vec![0xff])),
                ]
                .into(),
            ),
            ..Secret::default()
        };
        assert_eq!(value(Some(&s), "ns", "auth", "users").unwrap(), "- a");
        assert_eq!(
            value(Some(&s), "ns", "auth", "password").unwrap_err(),
            "Secret ns/auth has no key password"
        );
        assert_eq!(
            value(Some(&s), "ns", "auth", "bin").unwrap_err(),
            "Secret ns/auth key bin is not UTF-8"
        );
        assert_eq!(
            value(None, "ns", "auth", "users").unwrap_err(),
            "Secret ns/auth not found"
        );
    }
}
