//! One file per experiment; [`dispatch`] maps a declaration to its code.
use crate::decl::Declaration;
use crate::harness::{ExpError, Run};
use rdmakit::catalog::Experiment;

mod cq_modes;
mod mr_registration;
mod one_vs_two_sided;
mod qp_errors;
mod qp_states;
mod security_keys;
mod transports;

/// Run the code of `decl`'s experiment.
pub(crate) fn dispatch(decl: &Declaration, run: &mut Run<'_>) -> Result<(), ExpError> {
    match decl.experiment {
        Experiment::MrRegistration => mr_registration::run(run),
        Experiment::QpStates => qp_states::run(run),
        Experiment::QpErrors => qp_errors::run(run),
        Experiment::SecurityKeys => security_keys::run(run),
        Experiment::OneVsTwoSided => one_vs_two_sided::run(run),
        Experiment::CqModes => cq_modes::run(run),
        Experiment::Transports => transports::run(run),
        // No declaration names it (rdmactl runs it on the tracer), so no run gets here.
        Experiment::Wire => Err(ExpError::Failed(
            "`wire` is rdmactl's tracer experiment, not a verbs one".into(),
        )),
    }
}
