/** base64url (RFC 4648 §5, no padding) of the UTF-8 bytes of `text`. */
export function base64url(text: string): string {
  const bytes = new TextEncoder().encode(text);
  let binary = '';
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

export const WS_PROTOCOL = 'tokenpipe.v1';

/**
 * Browsers cannot set headers on a WebSocket handshake, so a key travels as a second
 * subprotocol; base64url because a key may hold characters a subprotocol token may not.
 */
export function wsProtocols(apiKey: string | undefined): string[] {
  const key = apiKey?.trim();
  return key ? [WS_PROTOCOL, `tokenpipe.bearer.${base64url(key)}`] : [WS_PROTOCOL];
}

export function authHeaders(apiKey: string | undefined): Record<string, string> {
  const key = apiKey?.trim();
  return key ? { Authorization: `Bearer ${key}` } : {};
}
