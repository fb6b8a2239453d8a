//! The open-file limit (`RLIMIT_NOFILE`): every connection a server, exporter or load generator
//! holds is a descriptor. Callers differ only in how far they lift it, so that is the parameter.

use std::io;

/// How far [`raise`] lifts the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RaisePolicy {
    /// The soft limit up to the hard one.
    ToHard,
    /// Both limits up to at least this many descriptors (only a privileged process may raise the
    /// hard limit); without the privilege, the soft limit up to the hard one.
    AtLeast(u64),
}

/// The soft limit before and after [`raise`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Raised {
    pub before: u64,
    pub after: u64,
}

/// This process's soft limit on open files.
pub fn soft_limit() -> io::Result<u64> {
    Ok(get()?.rlim_cur)
}

/// Lift the open-file limit as `policy` says; a refusal by the kernel leaves it where it was.
pub fn raise(policy: RaisePolicy) -> io::Result<Raised> {
    let lim = get()?;
    let wanted = match policy {
        RaisePolicy::ToHard => lim.rlim_max,
        RaisePolicy::AtLeast(n) => lim.rlim_max.max(n),
    };
    if wanted > lim.rlim_cur && set(wanted, wanted).is_err() && lim.rlim_cur < lim.rlim_max {
        // Not privileged to raise the hard limit: the soft one may still go up to it.
        let _ = set(lim.rlim_max, lim.rlim_max);
    }
    Ok(Raised {
        before: lim.rlim_cur,
        after: get()?.rlim_cur,
    })
}

fn get() -> io::Result<libc::rlimit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct passed to it.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(lim)
}

fn set(soft: u64, hard: u64) -> io::Result<()> {
    let lim = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit only reads the struct passed to it.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_to_the_hard_limit_never_lowers_it() {
        let before = soft_limit().unwrap();
        let raised = raise(RaisePolicy::ToHard).unwrap();
        assert_eq!(raised.before, before);
        assert!(raised.after >= before);
        assert_eq!(soft_limit().unwrap(), raised.after);
    }
}
