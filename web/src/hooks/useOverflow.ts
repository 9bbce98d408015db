/**
 * The overflow offer: a send, edit, regenerate or tool result whose prompt would not fit is
 * held back, and the ways on are worked out with exact counts before they are shown, so that
 * each one fits: the turns to drop (largest first, the user may pick others), or for a
 * message too long by itself its first and last part (in the message, or as a file).
 */
import { useCallback, useMemo, useRef, useState, type Dispatch, type RefObject } from 'react';
import type { WireMessage } from '../api/types';
import type { Attachment } from '../state/attachments';
import { overflows, turnsBefore } from '../state/context';
import { chatReducer, historyBefore, type ChatAction, type ChatState, type Conversation } from '../state/conversations';
import { chosenIds, cutToFit, largestFirst, shrinkCut, sizeTurns, turnKey, type Cut, type SizedTurn } from '../state/overflow';
import { outgoing } from '../state/outgoing';
import { questionOf, restamped, type AskAction } from '../state/asking';
import type { Settings } from '../state/settings';

/** Room left for a question about a message attached as a file. */
export const QUESTION_ROOM = 128;

/** A message too long by itself, cut to fit: which part, and whether every earlier turn goes too. */
export interface CutOffer extends Cut {
  /** -1: the typed text; else the index of the attachment cut. */
  part: number;
  dropAll: boolean;
}

export interface Offer {
  action: AskAction;
  promptTokens: number;
  limit: number;
  maxTokens: number | null;
  /** The turns before the question, with their sizes. */
  turns: SizedTurn[];
  /** Keys of the turns to drop. */
  chosen: string[];
  /** The exact prompt once the chosen turns go; null while it is counted. */
  planTokens: number | null;
  /** The message fits once every earlier turn goes. */
  fitsAlone: boolean;
  cut: CutOffer | null;
  systemPromptKept: boolean;
}

export interface OverflowContext {
  state: ChatState;
  settingsFor(conversationId: string): Settings;
  limit: number | null;
  count(messages: WireMessage[]): Promise<number | null>;
}

interface Options {
  latest: RefObject<OverflowContext>;
  dispatch: Dispatch<ChatAction>;
  /** Ask again (after a drop or a cut): `base` is the state to apply it to. */
  ask: RefObject<(action: AskAction, base?: ChatState) => Promise<boolean>>;
  /** Put text and files in the composer (a new `token` puts them again). */
  carry(text: string, attachments: Attachment[]): void;
}

const exact = async (count: OverflowContext['count'], messages: WireMessage[]) => (await count(messages)) ?? Number.POSITIVE_INFINITY;

/** The question (send, edit) with the part `part` replaced by `text`. */
function withPart(action: AskAction, part: number, text: string, from: number): AskAction {
  if (action.type !== 'send' && action.type !== 'edit') return action;
  if (part < 0) return { ...action, user: { ...action.user, content: text } };
  const attachments = (action.user.attachments ?? []).map((a, i) => (i === part ? { name: a.name, text, cutFrom: from, ...(a.pasted ? { pasted: true } : {}) } : a));
  return { ...action, user: { ...action.user, attachments } };
}

/** The longest part of a question: its typed text (-1) or an attachment. */
function longestPart(action: AskAction): { part: number; text: string } | null {
  if (action.type !== 'send' && action.type !== 'edit') return null;
  let best = { part: -1, text: action.user.content };
  (action.user.attachments ?? []).forEach((a, i) => {
    if (a.text.length > best.text.length) best = { part: i, text: a.text };
  });
  return best;
}

export function useOverflow({ latest, dispatch, ask, carry }: Options) {
  const [offer, setOffer] = useState<Offer | null>(null);
  const offerRef = useRef(offer);
  offerRef.current = offer;
  const counting = useRef(0);

  /** True if the action's prompt would overflow: then the offer is shown instead. */
  const check = useCallback(
    async (action: AskAction, conversation: Conversation, messages: WireMessage[], s: Settings): Promise<boolean> => {
      const { limit, count } = latest.current;
      const tokens = limit ? await count(messages) : null;
      if (!limit || tokens === null || !overflows(tokens, limit, s.maxTokens)) return false;
      const index = conversation.messages.findIndex((m) => m.id === action.assistant.id);
      const question = conversation.messages.slice(0, index).findLastIndex((m) => m.role === 'user');
      const turns = turnsBefore(conversation, Math.max(0, question));
      const without = (ids: Iterable<string>) => historyBefore(conversation, action.assistant.id, s.systemPrompt, new Set(ids));
      const alone = turns.length ? await exact(count, without(turns.flatMap((t) => t.ids))) : tokens;
      const fitsAlone = !overflows(alone, limit, s.maxTokens);
      let sized: SizedTurn[] = turns.map((t) => ({ ...t, tokens: 0 }));
      let chosen: string[] = [];
      let planTokens: number | null = null;
      let cut: CutOffer | null = null;
      if (fitsAlone) {
        sized = await sizeTurns(turns, tokens, (ids) => exact(count, without(ids)));
        chosen = largestFirst(sized, tokens, limit, s.maxTokens);
        planTokens = await exact(count, without(chosenIds(turns, chosen)));
        // Sizes are estimates of a sum; the next largest goes until the exact count fits.
        const rest = [...sized].sort((a, b) => b.tokens - a.tokens).filter((t) => !chosen.includes(turnKey(t)));
        while (overflows(planTokens, limit, s.maxTokens) && rest.length) {
          chosen = [...chosen, turnKey(rest.shift()!)];
          planTokens = await exact(count, without(chosenIds(turns, chosen)));
        }
      } else {
        const longest = longestPart(action);
        if (longest) {
          const tryCut = async (dropAll: boolean) => {
            const base = dropAll ? without(turns.flatMap((t) => t.ids)) : messages;
            const countWith = (text: string) => exact(count, [...base.slice(0, -1), ...outgoing(withPartUser(action, longest.part, text))]);
            const found = await cutToFit(longest.text, countWith, limit, s.maxTokens);
            return found ? { ...found, part: longest.part, dropAll } : null;
          };
          // With the earlier turns kept the ends may be a few words: then they go too.
          const keeping = await tryCut(false);
          const alone = turns.length ? await tryCut(true) : null;
          cut = keeping && (!alone || keeping.keep * 2 >= alone.keep) ? keeping : alone;
        }
      }
      setOffer({ action, promptTokens: tokens, limit, maxTokens: s.maxTokens, turns: sized, chosen, planTokens, fitsAlone, cut, systemPromptKept: messages[0]?.role === 'system' });
      return true;
    },
    [latest],
  );

  const actions = useMemo(() => {
    const conversationOf = (pending: Offer) => latest.current.state.conversations[pending.action.conversationId];
    return {
      /** Pick or unpick a turn to drop; the plan is counted again. */
      toggle(key: string) {
        const pending = offerRef.current;
        const conversation = pending && conversationOf(pending);
        if (!pending || !conversation) return;
        const chosen = pending.chosen.includes(key) ? pending.chosen.filter((k) => k !== key) : [...pending.chosen, key];
        setOffer({ ...pending, chosen, planTokens: null });
        const ticket = ++counting.current;
        const s = latest.current.settingsFor(conversation.id);
        const dropping = new Set(chosenIds(pending.turns, chosen));
        const next = chatReducer(latest.current.state, pending.action).conversations[conversation.id] ?? conversation;
        void exact(latest.current.count, historyBefore(next, pending.action.assistant.id, s.systemPrompt, dropping)).then((tokens) => {
          if (ticket === counting.current) setOffer((o) => (o && o.action === pending.action ? { ...o, planTokens: tokens } : o));
        });
      },
      newConversation() {
        const pending = offerRef.current;
        if (!pending) return;
        setOffer(null);
        dispatch({ type: 'new' });
        const files = pending.action.type === 'send' || pending.action.type === 'edit' ? (pending.action.user.attachments ?? []) : [];
        carry(questionOf(pending.action, latest.current.state), files);
      },
      drop() {
        const pending = offerRef.current;
        if (!pending || !pending.chosen.length) return;
        const now = Date.now();
        const drop: ChatAction = { type: 'dropTurns', conversationId: pending.action.conversationId, messageIds: chosenIds(pending.turns, pending.chosen), now };
        const dropped = chatReducer(latest.current.state, drop);
        dispatch(drop);
        // The answer comes after the drop: its usage no longer counts the dropped turns.
        void ask.current(restamped(pending.action, now + 1), dropped).then((sent) => {
          if (sent && pending.action.type === 'send') carry('', []);
        });
      },
      /** Send the message with its longest part cut to its ends (and every earlier turn dropped where that is needed too). */
      cut() {
        const pending = offerRef.current;
        const cutting = pending?.cut;
        if (!pending || !cutting) return;
        const now = Date.now();
        let base = latest.current.state;
        if (cutting.dropAll && pending.turns.length) {
          const drop: ChatAction = { type: 'dropTurns', conversationId: pending.action.conversationId, messageIds: pending.turns.flatMap((t) => t.ids), now };
          base = chatReducer(base, drop);
          dispatch(drop);
        }
        void ask.current(restamped(withPart(pending.action, cutting.part, cutting.text, cutting.from), now + 1), base).then((sent) => {
          if (sent && pending.action.type === 'send') carry('', []);
        });
      },
      /** The typed text to the composer as a file, cut to leave room for a question about it (the earlier turns dropped where the cut needs it). */
      attach() {
        const pending = offerRef.current;
        const cutting = pending?.cut;
        if (!pending || !cutting || cutting.part !== -1 || (pending.action.type !== 'send' && pending.action.type !== 'edit')) return;
        const whole = pending.action.user.content;
        const text = shrinkCut(whole, cutting, QUESTION_ROOM);
        setOffer(null);
        if (cutting.dropAll && pending.turns.length)
          dispatch({ type: 'dropTurns', conversationId: pending.action.conversationId, messageIds: pending.turns.flatMap((t) => t.ids), now: Date.now() });
        carry('', [...(pending.action.user.attachments ?? []), { name: 'message.txt', text, ...(text.length < whole.length ? { cutFrom: whole.length } : {}) }]);
      },
      dismiss() {
        setOffer(null);
        document.getElementById('composer-input')?.focus();
      },
    };
  }, [latest, dispatch, ask, carry]);

  return { offer, setOffer, check, actions };
}

function withPartUser(action: AskAction, part: number, text: string) {
  const changed = withPart(action, part, text, 0);
  return changed.type === 'send' || changed.type === 'edit' ? changed.user : { id: '', role: 'user' as const, content: text, createdAt: 0 };
}
