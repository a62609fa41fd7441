//! Jobs a reconciler runs (installers): their outcome from their conditions.

use k8s_openapi::api::batch::v1::Job;

pub enum JobOutcome {
    Running,
    Succeeded,
    Failed(String),
}

/// A Job's outcome from its conditions (the Job controller's, or a test's standing in for it).
pub fn job_outcome(job: &Job) -> JobOutcome {
    let conditions = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    for c in &conditions {
        if c.status == "True" && (c.type_ == "Complete" || c.type_ == "SuccessCriteriaMet") {
            return JobOutcome::Succeeded;
        }
        if c.status == "True" && (c.type_ == "Failed" || c.type_ == "FailureTarget") {
            return JobOutcome::Failed(format!(
                "{}: {}",
                c.reason.clone().unwrap_or_else(|| "Failed".into()),
                c.message.clone().unwrap_or_default()
            ));
        }
    }
    JobOutcome::Running
}
