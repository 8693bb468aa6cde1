/**
 * Shorter strings than this are not searched for in a message: a placeholder pasted as a token
 * (`--token T`) would match ordinary text and garble the message (`the control pl[redacted]ne`),
 * and a string that short is no secret.
 */
export const MIN_REDACTED_SECRET_CHARS = 8;

/** `text` with every occurrence of `secret` replaced by `[redacted]` (defence in depth for messages we did not write). */
export function redactSecret(text: string, secret: string): string {
  return secret.length >= MIN_REDACTED_SECRET_CHARS ? text.split(secret).join('[redacted]') : text;
}
