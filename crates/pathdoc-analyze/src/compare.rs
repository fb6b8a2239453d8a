//! Two captures of one path (filled in below).
