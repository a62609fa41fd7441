//! What a reconcile reports: conditions (their transition time kept while their status holds), an Event when
//! the object's headline changes, and the status written back when it differs.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::Api;
use kube::core::object::HasStatus;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::Resource;

use super::apply::apply_status;
use super::base::Base;
use super::error::Error;
use super::jobs::WAITING;

/// Sets condition `type_` in `conditions`, keeping its transition time when its status does not change.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) {
    let status = if status { "True" } else { "False" };
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = now;
            }
            c.status = status.into();
            c.reason = reason.into();
            c.message = message.into();
            c.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            observed_generation: generation,
            last_transition_time: now,
        }),
    }
}

/// Sets several conditions of one generation: `(type, status, reason, message)` each.
pub fn set_conditions(
    conditions: &mut Vec<Condition>,
    generation: i64,
    updates: &[(&str, bool, &str, &str)],
) {
    for (type_, status, reason, message) in updates {
        set_condition(
            conditions,
            type_,
            *status,
            reason,
            message,
            Some(generation),
        );
    }
}

/// Publishes an Event about `obj`; a failure is logged, never fatal to the reconcile.
pub async fn publish<K>(recorder: &Recorder, obj: &K, type_: EventType, reason: &str, note: &str)
where
    K: Resource<DynamicType = ()>,
{
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &obj.object_ref(&())).await {
        tracing::debug!(error = %e, "publishing an event");
    }
}

/// The headline of an object's status, which an Event announces when it changes: BPA's and Software's phase,
/// SIP's and ViNO's Ready reason.
pub struct Headline<'a> {
    /// The headline before this reconcile (None: there was none).
    pub before: Option<&'a str>,
    pub now: &'a str,
    pub warning: bool,
    pub note: &'a str,
}

impl<'a> Headline<'a> {
    /// BPA's and Software's headline: the phase, except [`WAITING`] while an installer cannot start (a warning,
    /// as `Failed` is), noted with the message of condition `note_of`; `before` is the old status's phase and
    /// conditions.
    pub fn phase(
        before: (Option<&'a str>, &[Condition]),
        phase: &'a str,
        conditions: &'a [Condition],
        note_of: &str,
    ) -> Self {
        let now = announced(phase, conditions);
        Headline {
            before: before.0.map(|b| announced(b, before.1)),
            now,
            warning: now == "Failed" || now == WAITING,
            note: conditions
                .iter()
                .find(|c| c.type_ == note_of)
                .map_or("", |c| c.message.as_str()),
        }
    }
}

/// A phase as its headline: `Installing` is [`WAITING`] while the `Installing` condition says so.
fn announced<'a>(phase: &'a str, conditions: &[Condition]) -> &'a str {
    let waiting = conditions
        .iter()
        .any(|c| c.type_ == "Installing" && c.reason == WAITING);
    if phase == "Installing" && waiting {
        WAITING
    } else {
        phase
    }
}

/// The end of every reconcile: an Event when the headline changed, then `status` written (server-side, the
/// whole status) when it differs from the object's own.
pub async fn report<K>(
    base: &Base,
    obj: &K,
    ns: &str,
    headline: Headline<'_>,
    status: &K::Status,
) -> Result<(), Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + HasStatus
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::Status: PartialEq + serde::Serialize,
{
    if !headline.now.is_empty() && headline.before != Some(headline.now) {
        let kind = if headline.warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        publish(&base.recorder, obj, kind, headline.now, headline.note).await;
    }
    if obj.status() != Some(status) {
        let name = obj.meta().name.clone().unwrap_or_default();
        apply_status(
            &Api::<K>::namespaced(base.client.clone(), ns),
            &name,
            status,
        )
        .await?;
    }
    Ok(())
}
