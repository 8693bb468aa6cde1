/**
 * The .zpkg container, byte by byte (all integers big-endian):
 *
 *   magic      8 bytes  "ZPKG\0v1\n"
 *   u32        manifest length M (≤ MAX_MANIFEST_BYTES), then M bytes: the canonical manifest JSON
 *   u32        signature length S (= 64), then S bytes: Ed25519 over the manifest bytes
 *   files      the content of manifest.files[0], files[1], … back to back (sizes from the manifest)
 *   EOF        exactly after the last file: trailing bytes are an error
 *
 * Chosen over tar: one reader of a few dozen lines, no headers outside the signed manifest (so no
 * unsigned path, mode or link can slip in), and the signature is checked before any file is read.
 */
export const ZPKG_MAGIC = Buffer.from('ZPKG\0v1\n', 'latin1');
export const MAX_MANIFEST_BYTES = 16 * 1024 * 1024;
export const ED25519_SIGNATURE_BYTES = 64;
