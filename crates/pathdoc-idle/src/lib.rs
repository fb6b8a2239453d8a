//! Idle-timeout check: when each stateful box forgets an idle connection (RFC 5382 REQ-5, RFC 4787 REQ-5).
