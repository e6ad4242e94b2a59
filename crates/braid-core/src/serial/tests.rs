//! Cross-module tests.
