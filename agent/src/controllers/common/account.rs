//! The account (ServiceAccount, Role, RoleBinding) a reconciler's Job or DaemonSet runs as, owned like the
//! rest of its objects.

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;

use super::error::Error;
use super::owned::Owned;

/// A ServiceAccount `name` with a Role of `rules` bound to it, all owned: the identity of a Job or DaemonSet a
/// reconciler runs, allowed exactly what it needs.
pub async fn apply_account<O>(
    owned: &mut Owned<'_, O>,
    name: &str,
    rules: Vec<PolicyRule>,
) -> Result<(), Error>
where
    O: Resource<DynamicType = ()>,
{
    let meta = ObjectMeta {
        name: Some(name.to_owned()),
        ..ObjectMeta::default()
    };
    owned
        .apply(ServiceAccount {
            metadata: meta.clone(),
            ..ServiceAccount::default()
        })
        .await?;
    owned
        .apply(Role {
            metadata: meta.clone(),
            rules: Some(rules),
        })
        .await?;
    let ns = owned.namespace().to_owned();
    owned
        .apply(RoleBinding {
            metadata: meta,
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "Role".into(),
                name: name.to_owned(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".into(),
                name: name.to_owned(),
                namespace: Some(ns),
                ..Subject::default()
            }]),
        })
        .await?;
    Ok(())
}

/// A rule of the core API group: `verbs` on `resources`, only those named `names` when there are any.
pub fn core_rule(resources: &[&str], names: &[&str], verbs: &[&str]) -> PolicyRule {
    let strings = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(strings(resources)),
        resource_names: (!names.is_empty()).then(|| strings(names)),
        verbs: strings(verbs),
        ..PolicyRule::default()
    }
}
