import { useEffect, useState } from 'react';

/** Date.now(), refreshed twice a second while `active`: live figures without a render per token. */
export function useFrameClock(active: boolean): number {
  const [now, setNow] = useState(Date.now);
  useEffect(() => {
    if (!active) return;
    setNow(Date.now());
    const timer = setInterval(() => setNow(Date.now()), 500);
    return () => clearInterval(timer);
  }, [active]);
  return now;
}
