//! Who and when for a report's provenance: `uname(2)` and the local time with its zone offset
//! (`localtime_r`, which reads TZ and /etc/localtime as `date` does).

use std::ffi::CStr;
use std::time::{SystemTime, UNIX_EPOCH};

/// `uname(2)` fields as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uname {
    /// The network node name (what `hostname` prints).
    pub nodename: String,
    /// Kernel name, release, version and machine in `uname -srvm` order.
    pub os: String,
}

/// The running kernel and host name, `None` if `uname(2)` fails (it does not on Linux).
pub fn uname() -> Option<Uname> {
    // SAFETY: utsname is plain old data; uname fills it with NUL-terminated strings.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    let field = |f: &[libc::c_char]| {
        // SAFETY: the kernel NUL-terminates every field within its array.
        unsafe { CStr::from_ptr(f.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    };
    Some(Uname {
        nodename: field(&u.nodename),
        os: [
            field(&u.sysname),
            field(&u.release),
            field(&u.version),
            field(&u.machine),
        ]
        .join(" "),
    })
}

/// `time` as ISO 8601 local time with the zone offset: `2026-11-26T15:54:05+01:00`.
pub fn iso8601_local(time: SystemTime) -> String {
    let secs = time
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as libc::time_t)
        .unwrap_or(0);
    // SAFETY: tm is plain old data; localtime_r writes it and touches no shared buffer.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    if unsafe { libc::localtime_r(&secs, &mut tm) }.is_null() {
        return iso8601(0, &civil_utc(secs));
    }
    let fields = [
        tm.tm_year as i64 + 1900,
        tm.tm_mon as i64 + 1,
        tm.tm_mday as i64,
        tm.tm_hour as i64,
        tm.tm_min as i64,
        tm.tm_sec as i64,
    ];
    iso8601(tm.tm_gmtoff, &fields)
}

fn iso8601(offset_s: i64, f: &[i64; 6]) -> String {
    let sign = if offset_s < 0 { '-' } else { '+' };
    let off = offset_s.unsigned_abs();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{sign}{:02}:{:02}",
        f[0],
        f[1],
        f[2],
        f[3],
        f[4],
        f[5],
        off / 3600,
        off / 60 % 60
    )
}

/// UTC calendar fields of a Unix time (Howard Hinnant's days-from-civil inverse), the fallback
/// when the local zone cannot be read.
fn civil_utc(secs: i64) -> [i64; 6] {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    [year, month, day, rem / 3600, rem / 60 % 60, rem % 60]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn formats_with_a_zone_offset() {
        let t = UNIX_EPOCH + Duration::from_secs(1_795_708_445);
        let s = iso8601_local(t);
        // 2026-11-26T15:54:05Z in whatever zone the test runs; the shape is fixed.
        assert_eq!(s.len(), 25, "{s}");
        assert!(
            s.as_bytes()[10] == b'T' && matches!(s.as_bytes()[19], b'+' | b'-'),
            "{s}"
        );
        assert_eq!(civil_utc(1_795_708_445), [2026, 11, 26, 15, 54, 5]);
        assert_eq!(
            iso8601(-(5 * 3600 + 1800), &civil_utc(0)),
            "1970-01-01T00:00:00-05:30"
        );
    }

    #[test]
    fn uname_names_the_kernel() {
        let u = uname().unwrap();
        assert!(u.os.starts_with("Linux "), "{u:?}");
        assert!(!u.nodename.is_empty());
    }
}
