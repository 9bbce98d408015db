import { describe, expect, it } from 'vitest';
import { keepEnds } from './attachments';
import type { Turn } from './context';
import { chosenIds, cutToFit, largestFirst, shrinkCut, sizeTurns, turnKey } from './overflow';

const turn = (id: string, number: number): Turn => ({ ids: [id, `${id}-a`], question: id, number });

describe('the overflow offer', () => {
  it('sizes each turn by the count without it, and picks the largest first until it fits', async () => {
    const turns = [turn('t1', 1), turn('t2', 2), turn('t3', 3), turn('t4', 4)];
    const sizes: Record<string, number> = { t1: 10, t2: 10, t3: 7000, t4: 400 };
    const total = 100 + Object.values(sizes).reduce((a, b) => a + b, 0); // 7520
    const sized = await sizeTurns(turns, total, async (ids) => total - (sizes[[...ids][0] ?? ''] ?? 0));
    expect(sized.map((t) => t.tokens)).toEqual([10, 10, 7000, 400]);
    // the 7000-token turn alone is enough (the fewest oldest would have taken three)
    expect(largestFirst(sized, total, 7500, null)).toEqual(['t3']);
    expect(largestFirst(sized, total, 500, null)).toEqual(['t3', 't4']);
    // nothing is chosen when it already fits, or when even every turn is not enough
    expect(largestFirst(sized, total, 9000, null)).toEqual([]);
    expect(largestFirst(sized, total, 150, null)).toEqual([]);
    // ties go oldest first
    const even = sized.map((t) => ({ ...t, tokens: 100 }));
    expect(largestFirst(even, 400, 300, null)).toEqual(['t1', 't2']);
    expect(chosenIds(turns, ['t3', 't1'])).toEqual(['t1', 't1-a', 't3', 't3-a']);
    expect(turnKey(turns[1]!)).toBe('t2');
  });

  it('cuts a text too long by itself to the longest ends that fit, by exact counts', async () => {
    const text = 'x'.repeat(10_000);
    const countWith = async (t: string) => 50 + Math.ceil(t.length / 4); // 4 characters a token
    const cut = await cutToFit(text, countWith, 2048, null);
    expect(cut).not.toBeNull();
    expect(cut!.text).toBe(keepEnds(text, cut!.keep));
    expect(cut!.promptTokens + 64).toBeLessThanOrEqual(2048);
    expect((await countWith(keepEnds(text, cut!.keep + 1))) + 64).toBeGreaterThan(2048); // the longest that fits
    expect(cut!.from).toBe(10_000);
    expect(cut!.markerTokens).toBe(await countWith(keepEnds(text, 0)));
    expect(await cutToFit(text, async () => 5000, 2048, null)).toBeNull(); // the rest alone is too long
    // room for a question: fewer characters kept in proportion
    const shorter = shrinkCut(text, { ...cut!, promptTokens: 1050, markerTokens: 50 }, 250);
    expect(shorter.length).toBeLessThan(cut!.text.length);
    expect(shorter.startsWith('x'.repeat(Math.floor((cut!.keep * 3) / 4)))).toBe(true);
  });
});
