// sanitizer.mjs - a sanitizer's report in a daemon's output, as every
// suite that starts attnd looks for it (tests/server/helper.mjs,
// tests/web/harness.mjs): ASan, LeakSanitizer at exit, UBSan, TSan.

/** A sanitizer's report in the daemon's stderr. */
export const SANITIZER_REPORT = /(ERROR|WARNING): (Address|Leak|Thread|UndefinedBehavior)Sanitizer|runtime error: /;

/** The first sanitizer report in log past from, from the line it starts
 * on, up to 8000 characters ('' when there is none): what a long run
 * prints rather than the whole log, a line per request. */
export function sanitizerReport(log, from = 0) {
  const m = SANITIZER_REPORT.exec(log.slice(from));
  if (!m) return '';
  const at = log.lastIndexOf('\n', from + m.index) + 1;
  return log.slice(at, at + 8000);
}
