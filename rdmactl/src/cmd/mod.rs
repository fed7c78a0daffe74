//! One module per subcommand.
pub mod lab;
