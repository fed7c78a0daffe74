//! One module per subcommand.
pub mod counters;
pub mod devices;
pub mod doctor;
pub mod explain;
pub mod lab;
pub mod verbs;
