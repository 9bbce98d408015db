import { describe, expect, it } from 'vitest';
import { canContinue, chatReducer, continuationOf, initialChatState, type ChatAction, type ChatState, type Message } from './conversations';
import { mergeCalls, prettyJsonPrefix, thoughtFor } from './parts';

const loaded = chatReducer(initialChatState, { type: 'hydrate', conversations: [] });
const ref = { conversationId: 'c1', messageId: 'a1' };
const user: Message = { id: 'u1', role: 'user', content: 'Hi', createdAt: 0 };
const waiting: Message = { id: 'a1', role: 'assistant', content: '', createdAt: 0, status: 'waiting' };
const apply = (...actions: ChatAction[]): ChatState =>
  actions.reduce(chatReducer, chatReducer(loaded, { type: 'send', conversationId: 'c1', user, assistant: waiting, now: 1 }));
const answerOf = (state: ChatState) => state.conversations.c1?.messages[1];

describe('prettyJsonPrefix', () => {
  const samples = ['{"city":"Paris","days":[1,2,{"x":null}],"deep":{"a":{}},"empty":[],"s":"a,b:{c}\\"]"}', '[]', '{}', '{"n":-1.5,"t":true}'];

  it('indents whole JSON as JSON.stringify(value, null, 2) does', () => {
    for (const text of samples) expect(prettyJsonPrefix(text)).toBe(JSON.stringify(JSON.parse(text), null, 2));
  });

  it('only adds to its output as the text grows, wherever the text is cut', () => {
    for (const text of samples) {
      let previous = '';
      for (let cut = 0; cut <= text.length; cut++) {
        const now = prettyJsonPrefix(text.slice(0, cut));
        expect(now.startsWith(previous)).toBe(true);
        previous = now;
      }
    }
  });

  it('ignores the whitespace the model wrote between tokens, not inside strings', () => {
    expect(prettyJsonPrefix('{ "a" :\n 1 , "b": " x y "}')).toBe('{\n  "a": 1,\n  "b": " x y "\n}');
  });
});

describe('mergeCalls', () => {
  it('joins fragments by index, the first one naming the call', () => {
    const first = mergeCalls(undefined, [
      { index: 0, callId: 'call_a', name: 'get_weather', text: '' },
      { index: 0, text: '{"city":' },
      { index: 1, callId: 'call_b', name: 'get_time', text: '{}' },
    ]);
    const merged = mergeCalls(first, [{ index: 0, text: '"Paris"}' }]);
    expect(merged).toEqual([
      { index: 0, id: 'call_a', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { index: 1, id: 'call_b', name: 'get_time', arguments: '{}' },
    ]);
    expect(first[0]?.arguments).toBe('{"city":'); // the earlier state is left as it was
  });
});

describe('thoughtFor', () => {
  it('says how long, in words', () => {
    expect(thoughtFor(400)).toBe('Thought for less than a second');
    expect(thoughtFor(3240)).toBe('Thought for 3.2 s');
    expect(thoughtFor(42_600)).toBe('Thought for 43 s');
  });
});

describe('chatReducer: the thinking and the calls of an answer', () => {
  it('keeps the thinking apart and times it until the answer begins', () => {
    const state = apply(
      { type: 'answer/append', ...ref, text: '', reasoning: 'Let me ', at: 1000 },
      { type: 'answer/append', ...ref, text: '', reasoning: 'think.', at: 1500 },
      { type: 'answer/append', ...ref, text: 'Four.', at: 3200 },
      { type: 'answer/append', ...ref, text: ' Sure.', at: 3300 },
      { type: 'answer/finished', ...ref, finishReason: 'stop', at: 4000 },
    );
    expect(answerOf(state)).toMatchObject({ content: 'Four. Sure.', reasoning: 'Let me think.', reasoningStartedAt: 1000, reasoningEndedAt: 3200, status: 'done' });
  });

  it('ends the thinking with the answer when nothing else came (cut at max tokens)', () => {
    const state = apply(
      { type: 'answer/append', ...ref, text: '', reasoning: 'Hmm', at: 1000 },
      { type: 'answer/finished', ...ref, finishReason: 'length', at: 2500 },
    );
    expect(answerOf(state)).toMatchObject({ content: '', reasoning: 'Hmm', reasoningEndedAt: 2500, finishReason: 'length' });
  });

  it('collects tool calls, and a call ends the thinking too', () => {
    const state = apply(
      { type: 'answer/append', ...ref, text: '', reasoning: 'A tool helps.', at: 10 },
      { type: 'answer/append', ...ref, text: '', calls: [{ index: 0, callId: 'call_1', name: 'get_weather', text: '{"city"' }], at: 20 },
      { type: 'answer/append', ...ref, text: '', calls: [{ index: 0, text: ':"Oslo"}' }], at: 30 },
      { type: 'answer/finished', ...ref, finishReason: 'tool_calls', at: 40 },
    );
    expect(answerOf(state)).toMatchObject({
      reasoningEndedAt: 20,
      toolCalls: [{ index: 0, id: 'call_1', name: 'get_weather', arguments: '{"city":"Oslo"}' }],
      status: 'done',
      finishReason: 'tool_calls',
    });
  });

  it('leaves an answer without thinking as it was', () => {
    const state = apply({ type: 'answer/append', ...ref, text: 'Hi', at: 5 }, { type: 'answer/finished', ...ref, finishReason: 'stop', at: 6 });
    const a1 = answerOf(state);
    expect(a1?.reasoning).toBeUndefined();
    expect(a1?.reasoningEndedAt).toBeUndefined();
    expect(a1?.toolCalls).toBeUndefined();
  });
});

describe('chatReducer: Continue a partial answer', () => {
  const interrupted = () =>
    apply(
      { type: 'answer/started', ...ref, stream: 'tok' },
      { type: 'answer/append', ...ref, text: 'The capital of', seq: 3, at: 10 },
      { type: 'answer/interrupted', ...ref, reason: 'The server no longer has this answer', unresumable: true, at: 20 },
    );

  it('sends the partial answer back as the last, assistant, turn', () => {
    const conversation = interrupted().conversations.c1;
    expect(conversation && continuationOf(conversation, 'a1', 'Be brief.')).toEqual([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: 'The capital of' },
    ]);
  });

  it('runs the same answer again, the continuation appended to what it had', () => {
    const state = [
      { type: 'answer/continue', ...ref } as const,
      { type: 'answer/started', ...ref, stream: 'tok2' } as const,
      { type: 'answer/append', ...ref, text: ' France is Paris.', seq: 0, at: 30 } as const,
      { type: 'answer/finished', ...ref, finishReason: 'stop', at: 40 } as const,
    ].reduce<ChatState>((s, a) => chatReducer(s, a as ChatAction), interrupted());
    const a1 = answerOf(state);
    expect(a1).toMatchObject({ content: 'The capital of France is Paris.', status: 'done', finishReason: 'stop' });
    expect(a1?.unresumable).toBeUndefined();
    expect(a1?.note).toBeUndefined();
    expect(state.conversations.c1?.messages).toHaveLength(2); // no new version, no new turn
  });

  it('is offered only for an answer cut short with some text', () => {
    const cut = answerOf(interrupted());
    expect(cut && canContinue(cut)).toBe(true);
    const done = answerOf(apply({ type: 'answer/append', ...ref, text: 'Whole.' }, { type: 'answer/finished', ...ref, finishReason: 'stop' }));
    expect(done && canContinue(done)).toBe(false);
    const empty = answerOf(apply({ type: 'answer/interrupted', ...ref, reason: 'lost' }));
    expect(empty && canContinue(empty)).toBe(false);
    const finished = apply({ type: 'answer/append', ...ref, text: 'Whole.' }, { type: 'answer/finished', ...ref, finishReason: 'stop' });
    expect(chatReducer(finished, { type: 'answer/continue', ...ref })).toBe(finished);
  });
});
