/**
 * What a node name is: the control plane's rule for the names it stores (the nodes table checks
 * the same pattern), which the `zenova` CLI also uses to tell a node name it may quote back in a
 * message from a word that may be a pasted token.
 */

/** 2 to 31 lowercase letters, digits and hyphens. */
export const NODE_NAME_PATTERN = /^[a-z0-9-]{2,31}$/;

/** NODE_NAME_PATTERN in words, as a rule a name breaks (`name: must be …`). */
export const NODE_NAME_RULE = 'must be 2 to 31 characters of lowercase letters, digits and hyphens';
