/**
 * A small English corpus the generated tokenizers are learned from: the WordPiece vocabulary takes its words and
 * word endings from it, the byte-level BPE learns its merges on it. Plain ASCII prose on everyday topics, with
 * numbers, contractions and punctuation so every pre-tokenizer rule sees some use. Changing a single character
 * changes the tokenizers, hence the pinned hashes in test/gen.test.ts.
 */
export const ENGLISH_CORPUS = `The morning train to the coast leaves the old station at seven o'clock. Most of the people who take it every day know each other by sight, if not by name. They nod, they find their usual seats, and they open a book or a newspaper while the city slowly turns into fields and small villages. On a clear day you can see the sea from the window long before the train arrives, a thin line of silver under a very wide sky.

In the small kitchen at the back of the house, my grandmother taught me how to bake bread. She never used a recipe. She measured the flour with her hands, added warm water and a little salt, and waited for the yeast to wake up. "Bread doesn't like to be hurried," she said, and she was right. We kneaded the dough for ten minutes, covered it with a clean cloth, and let it rise for two hours near the stove. When it came out of the oven, the whole house smelled of it, and nobody could wait for it to cool.

A computer program is a list of instructions that a machine follows exactly. It doesn't guess what you meant; it does what you wrote. That is why programmers spend so much of their time reading and testing their own work. A good test describes what the program should do, runs it, and compares the result with the expected answer. When the two disagree, the programmer has found a mistake, and finding a mistake early is much cheaper than finding it after the program has been shipped to thousands of users.

The garden was planted in spring, with rows of beans, tomatoes, carrots and potatoes. By the middle of summer the plants were taller than the children, and the paths between them had almost disappeared. Every evening someone had to carry water from the well, because the rain that year was rare and short. In autumn the harvest filled twelve baskets, and the neighbours came to help, to talk, and to take home whatever they could carry.

The library in our town opened in 1908 and has never closed for more than a week. It holds about forty thousand books, a collection of old maps, and a room full of newspapers that go back more than a hundred years. Students come in the afternoon to study, older readers come in the morning to read the news, and on Saturdays the children's corner is so loud that the librarians have given up asking for silence. They say a quiet library is a library that nobody uses.

Sailors have always watched the weather. A change in the colour of the sky, a sudden drop in the wind, or a long, slow swell from the west can tell an experienced captain that a storm is coming, hours before it arrives. Modern ships carry radar, satellite receivers and detailed forecasts, but the old habits remain: look at the clouds, listen to the rigging, and never trust a calm sea too far from the harbour.

At the market on Thursday, the prices were written in chalk on small black boards: apples for two dollars a kilo, fresh fish for nine, cheese for fourteen. The sellers called out to everyone who walked past, and the buyers pretended not to hear them until they had seen every stall. It's a game that both sides understand. In the end, most people bought what they had planned to buy, plus one thing they hadn't, and went home happy.

Learning a new language is slow at first and then, one day, surprisingly fast. For months you translate every sentence in your head, word by word, and you feel that you will never understand a conversation at normal speed. Then you notice that you have stopped translating. You dream in the new language, you laugh at a joke before you could explain it, and you realise that the words have become part of the way you think.

The mountain road climbs through a forest of pine and birch, crosses a river on a narrow stone bridge, and reaches the pass after twenty-three sharp turns. In winter it is often closed, and the village on the other side is cut off for days. The people who live there keep large stores of wood, food and patience. When the road opens again in March, the first truck to come over the pass is greeted like an old friend.

Music teachers often say that practice does not make perfect; it makes permanent. If you repeat a passage with the same mistake a hundred times, you will play it wrong for years. Better to play it slowly and correctly, then a little faster, and then faster again, until the hands remember what the mind has learned. The same is true of writing, of sport, and of almost any skill worth having.`;
