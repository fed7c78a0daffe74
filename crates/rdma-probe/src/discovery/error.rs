//! Why a peer target, a file_sd document or the DNS resolver is not usable.

/// Why a target is not `HOST:PORT` ([`super::canonical_target`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// Nothing but white space.
    #[error("an empty target")]
    Empty,
    /// An address with port 0.
    #[error("`{0}`: port 0")]
    PortZero(String),
    /// No port, and no default one.
    #[error("`{0}` has no port (HOST:PORT)")]
    NoPort(String),
    /// What follows the last `:` is not a port.
    #[error("`{target}`: `{port}` is not a port (1-65535)")]
    BadPort {
        /// The target as given (trimmed).
        target: String,
        /// The text after the last `:`.
        port: String,
    },
    /// The host part is neither an address nor a DNS name.
    #[error("`{target}`: `{host}` is not a host name or address")]
    BadHost {
        /// The target as given (trimmed).
        target: String,
        /// Its host part.
        host: String,
    },
}

/// Why a file_sd document is unusable as a whole ([`super::parse_file_sd`]).
#[derive(Debug, thiserror::Error)]
pub enum FileSdError {
    /// A `.json` file that does not parse.
    #[error("not JSON: {0}")]
    Json(#[source] serde_json::Error),
    /// A YAML file that does not parse.
    #[error("not YAML: {0}")]
    Yaml(#[source] serde_yaml_ng::Error),
    /// The document is not a list.
    #[error("the top level is not a list of target groups")]
    NotAList,
}

/// Why the DNS resolver could not be set up.
#[derive(Debug, thiserror::Error)]
pub(super) enum DnsSetupError {
    /// The resolver's runtime could not be built.
    #[error("resolver runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The system's resolver configuration is unusable.
    #[error("resolv.conf: {0}")]
    ResolvConf(#[source] hickory_resolver::ResolveError),
}
