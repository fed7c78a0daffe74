//! The live suite lives in `tests/`; this library only holds helpers shared by its tests.
#![forbid(unsafe_code)]
