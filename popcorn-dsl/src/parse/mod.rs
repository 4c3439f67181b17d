//! Parser (in progress).
