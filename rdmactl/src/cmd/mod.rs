//! One module per subcommand.
pub mod lab;
pub mod verbs;
