"""Hand-written held-out evaluation prompts (original text written for this project, Apache-2.0).

Every prompt here was written by hand, one at a time, on topics that the training templates do not
cover. ``RESERVED_TERMS`` lists words and phrases that are specific to these prompts; the builder
refuses to emit any training prompt that contains one of them, and it also rejects any training
prompt whose content words are too similar to an eval prompt (see ``build_prompts``).

Each entry is ``(category, turns)`` where ``turns`` is a tuple of one or two user messages.
"""

from __future__ import annotations

EVAL_PROMPTS: list[tuple[str, tuple[str, ...]]] = [
    # ---------------------------------------------------------------- writing
    (
        "writing",
        (
            "Write a persuasive letter to your city council arguing for turning an abandoned railway "
            "line into a public walking trail. Keep it under 300 words.",
        ),
    ),
    (
        "writing",
        ("Compose a sonnet from the perspective of a lighthouse that has been automated and no longer has a keeper.",),
    ),
    (
        "writing",
        ("Draft a product description for a solar-powered backpack aimed at college students who commute by bike.",),
    ),
    (
        "writing",
        (
            "Write the opening paragraph of a mystery novel set on a research station in Antarctica "
            "during the polar night.",
        ),
    ),
    (
        "writing",
        (
            "Write a short fable about a crow who learns to count, ending with a clear moral.",
            "Rewrite the fable so the moral is never stated directly but is still obvious to a ten-year-old reader.",
        ),
    ),
    ("writing", ("Write a eulogy for a beloved neighborhood bookstore that is closing after 42 years.",)),
    (
        "writing",
        (
            "Write a wedding toast for my sister, who met her husband while volunteering at an animal "
            "shelter. Make it funny but heartfelt, around 200 words.",
        ),
    ),
    ("writing", ("Create a limerick about a programmer who keeps forgetting semicolons.",)),
    (
        "writing",
        (
            "Write a 150-word blog intro about the benefits of taking up chess as an adult.",
            "Now turn that intro into three tweets, each under 280 characters.",
        ),
    ),
    (
        "writing",
        (
            "Write a story of under 250 words told entirely through a series of grocery lists found in "
            "a kitchen drawer.",
        ),
    ),
    (
        "writing",
        (
            "Write a formal apology email from an airline to passengers whose flight was delayed "
            "overnight because of a crew scheduling error.",
        ),
    ),
    ("writing", ("Write a sequence of three haiku tracing a single day in the life of a street food vendor.",)),
    # --------------------------------------------------------------- roleplay
    (
        "roleplay",
        (
            "Pretend you are a medieval blacksmith explaining to a young apprentice why tempering "
            "steel matters. Stay in character.",
        ),
    ),
    (
        "roleplay",
        (
            "You are the captain of a 19th-century whaling ship. A homesick deckhand asks whether the "
            "voyage will ever end. Respond in character.",
        ),
    ),
    (
        "roleplay",
        (
            "Act as a hiring manager at a small video game studio and interview me for a junior level "
            "designer position. Ask your first question.",
            "My answer: I once built a full platformer level in a weekend game jam and playtested it "
            "with ten strangers. What is your follow-up question, and what did you think of my answer?",
        ),
    ),
    (
        "roleplay",
        (
            "Imagine you are Marie Curie giving a short speech to a group of high school girls in 1925 "
            "about pursuing science.",
        ),
    ),
    (
        "roleplay",
        ("Role-play as a grumpy but kind archivist who catches me eating a sandwich in the rare manuscripts room.",),
    ),
    ("roleplay", ("You are a gondolier in Venice. Describe what we are seeing as we glide under the Rialto Bridge.",)),
    (
        "roleplay",
        (
            "Pretend to be a support agent for an internet provider. I'm calling because my connection "
            "drops every evening at exactly 8 pm.",
        ),
    ),
    (
        "roleplay",
        (
            "Be a Socratic tutor. I want to understand why Earth has seasons, but don't just tell me the answer.",
            "I think it's because Earth is closer to the Sun in summer. Is that right?",
        ),
    ),
    (
        "roleplay",
        (
            "You are a sommelier at a small restaurant. I've ordered mushroom risotto and have a "
            "budget of $40 for a bottle. What do you recommend and why?",
        ),
    ),
    (
        "roleplay",
        ("Act as a hard-boiled detective in 1940s Los Angeles narrating how you found a clue in a smoky jazz club.",),
    ),
    (
        "roleplay",
        (
            "Pretend you're an alien anthropologist filing a report about the strange human tradition "
            "of birthday parties.",
        ),
    ),
    (
        "roleplay",
        (
            "You are a personal trainer meeting a 60-year-old client who has never exercised. "
            "Introduce yourself and propose a plan for the first week.",
        ),
    ),
    # -------------------------------------------------------------- reasoning
    (
        "reasoning",
        ("If all bloops are razzies and all razzies are lazzies, are all bloops definitely lazzies? Explain.",),
    ),
    (
        "reasoning",
        (
            "Five friends, Ana, Ben, Cleo, Dev and Eli, sit in a row. Ana is not at either end, Ben "
            "sits immediately to the right of Cleo, Dev is at the far left, and Eli is next to Dev. "
            "Who sits in the middle?",
        ),
    ),
    (
        "reasoning",
        (
            "A notebook and a pen cost $3.30 together. The notebook costs $3 more than the pen. How "
            "much does the pen cost? Think carefully before answering.",
        ),
    ),
    ("reasoning", ("Which word does not belong: violin, cello, trumpet, viola, double bass? Explain your reasoning.",)),
    (
        "reasoning",
        (
            "I have two coins that add up to 30 cents, and one of them is not a nickel. What are the coins?",
            "Now make up a similar riddle of your own and give its answer.",
        ),
    ),
    (
        "reasoning",
        ("If it takes 6 machines 6 minutes to make 6 widgets, how long would it take 60 machines to make 60 widgets?",),
    ),
    ("reasoning", ("A clock shows 3:15. What is the angle between the hour hand and the minute hand?",)),
    (
        "reasoning",
        (
            "Tom is taller than Maria. Maria is taller than Lee. Lee is taller than Priya. Is Priya "
            "taller than Tom, and who is the second tallest?",
        ),
    ),
    (
        "reasoning",
        (
            "A train departs at 9:40 and the journey takes 2 hours 35 minutes, but at 11:00 the clocks "
            "spring forward one hour for daylight saving time. What time does the clock show when "
            "the train arrives?",
        ),
    ),
    (
        "reasoning",
        (
            "In a round-robin tournament every team plays every other team exactly once. If 28 games "
            "were played, how many teams took part?",
        ),
    ),
    (
        "reasoning",
        (
            "Identify the flaw in this argument: 'Every time I wash my car it rains, so washing my car causes rain.'",
            "Give two more everyday examples of the same mistake in reasoning.",
        ),
    ),
    (
        "reasoning",
        (
            "There are three boxes labeled 'apples', 'oranges' and 'mixed', and every label is wrong. "
            "You may take one fruit from one box without looking inside. How do you fix all the "
            "labels?",
        ),
    ),
    # ------------------------------------------------------------------- math
    ("math", ("Solve for x: 3(x - 4) + 7 = 2x + 5.",)),
    ("math", ("What is the sum of the interior angles of a decagon?",)),
    ("math", ("A rectangle's length is twice its width, and its perimeter is 54 cm. Find its area.",)),
    (
        "math",
        (
            "Find the derivative of f(x) = x^3 * ln(x).",
            "Now find all x > 0 where that derivative equals zero.",
        ),
    ),
    ("math", ("In how many ways can 4 novels be chosen from a shelf of 10 different novels?",)),
    ("math", ("Prove that the square root of 3 is irrational.",)),
    (
        "math",
        (
            "A bag contains 5 red, 4 blue and 3 green marbles. Two are drawn without replacement. "
            "What is the probability that both are blue?",
        ),
    ),
    ("math", ("Compute the definite integral of 2x * e^(x^2) from 0 to 1.",)),
    ("math", ("The sum of three consecutive odd integers is 129. What are the integers?",)),
    (
        "math",
        (
            "An investment of $5,000 earns 4% interest compounded annually. How much is it worth after 6 years?",
            "How many years would it take to double at the same rate?",
        ),
    ),
    ("math", ("Use the Euclidean algorithm to find the greatest common divisor of 1071 and 462.",)),
    ("math", ("What is the remainder when 7^100 is divided by 5?",)),
    # ----------------------------------------------------------------- coding
    (
        "coding",
        (
            "Write a Python function that checks whether a string is a valid IPv4 address without "
            "using regular expressions.",
        ),
    ),
    (
        "coding",
        (
            "Implement a least-recently-used (LRU) cache class in Python with get and put methods "
            "that both run in O(1) time.",
        ),
    ),
    (
        "coding",
        (
            "Explain the difference between an operating-system process and a thread, and give a "
            "situation where you would choose each.",
        ),
    ),
    (
        "coding",
        (
            "Write a SQL query that finds the three customers with the highest total order value, "
            "given tables customers(id, name) and orders(id, customer_id, amount).",
            "Modify the query so it only counts orders placed in 2023, assuming orders also has an order_date column.",
        ),
    ),
    (
        "coding",
        (
            "Here is a buggy JavaScript function:\n\nfunction total(arr) {\n  let sum;\n  for (let i = "
            "0; i <= arr.length; i++) sum += arr[i];\n  return sum;\n}\n\nFind and fix the bugs.",
        ),
    ),
    (
        "coding",
        (
            "Write a bash one-liner that counts the total number of lines in all .py files under the "
            "current directory, recursively.",
        ),
    ),
    ("coding", ("Implement binary search on a rotated sorted array in C++ and explain its time complexity.",)),
    (
        "coding",
        ("Write a Rust function that returns the n-th Fibonacci number iteratively and returns None on u64 overflow.",),
    ),
    (
        "coding",
        (
            "Write a Python generator that yields prime numbers indefinitely.",
            "Now let it start from an arbitrary lower bound, and explain the performance trade-offs of your approach.",
        ),
    ),
    ("coding", ("What does the 'yield from' statement do in Python? Show a small example.",)),
    (
        "coding",
        (
            "Design a REST API for a simple to-do list app: list the endpoints, HTTP methods, and an "
            "example JSON body for each.",
        ),
    ),
    ("coding", ("Write a Go program that reads a text file and prints the 10 most frequent words with their counts.",)),
    # ------------------------------------------------------------- extraction
    (
        "extraction",
        (
            "Extract the company name, CEO, headquarters city and founding year from this text and "
            "return them as JSON:\n\nHalvorsen Maritime, the ferry operator founded in 1961, "
            "announced on Tuesday that Ingrid Solberg will take over as chief executive next month. "
            "The Bergen-based firm runs 34 vessels along the Norwegian coast.",
        ),
    ),
    (
        "extraction",
        (
            "List every date in the following text together with the event that happened on it, in "
            "chronological order:\n\nThe observatory's new telescope saw first light on 14 March "
            "2019. Construction had begun on 2 May 2015, and the mirror was delivered on 30 October "
            "2017. The official opening ceremony followed on 21 June 2019.",
        ),
    ),
    (
        "extraction",
        (
            "Turn this recipe into a markdown table with the columns Ingredient, Quantity and Unit:"
            "\n\nFor the pancakes you need 250 grams of buckwheat flour, 2 eggs, 500 milliliters of "
            "buttermilk, a pinch of salt and 30 grams of melted butter.",
        ),
    ),
    (
        "extraction",
        (
            'Classify the sentiment of each review as positive, negative or mixed:\n1. "The tent kept '
            'us dry through two nights of storms."\n2. "Zippers broke on day one and customer '
            'service never replied."\n3. "Roomy and light, but the poles are flimsy."',
            "Now return your answer as CSV with the columns review_number and sentiment.",
        ),
    ),
    (
        "extraction",
        (
            "Extract all email addresses and phone numbers from this message:\n\nHi team, for the "
            "catering order contact Priyanka at priyanka.rao@saffronbites.example or 555-0134. For the "
            "venue, call Marco on 555-0199 or write to bookings@harborhall.example.",
        ),
    ),
    (
        "extraction",
        (
            "From this passage, identify the three planets mentioned and the one fact given about "
            "each, as a JSON list of objects:\n\nMercury completes an orbit in just 88 days. Saturn's "
            "density is lower than that of water. Neptune has the strongest winds measured in the "
            "solar system.",
        ),
    ),
    (
        "extraction",
        (
            "Read this flight itinerary and give me the departure airport, arrival airport, flight "
            "number and layover duration:\n\nFlight QF 23 leaves Sydney at 07:50 and lands in "
            "Singapore at 13:10. After a layover, connecting flight QF 5 departs Singapore at 16:25 "
            "for Rome.",
        ),
    ),
    (
        "extraction",
        (
            "Who are the people in this paragraph and what is each person's job? Answer as a "
            "two-column table.\n\nAt the clinic, Dr. Okafor examined the x-rays while nurse Beatriz "
            "Alves prepared the cast. The receptionist, Tom Hale, called the patient's father, a "
            "firefighter named Luis Ortega.",
        ),
    ),
    (
        "extraction",
        (
            "Extract the key terms from this rental agreement excerpt as JSON (monthly_rent, deposit, "
            "start_date, notice_period):\n\nThe tenant agrees to pay 1,450 euros per month, beginning "
            "1 September 2024. A deposit equal to two months' rent is due at signing. Either party "
            "may end the agreement with 60 days' written notice.",
        ),
    ),
    (
        "extraction",
        (
            "Pull out the main claim and the two pieces of evidence offered for it:\n\nUrban beekeeping "
            "may help city gardens. A 2018 survey of Toronto allotments found 20 percent higher "
            "tomato yields near hives, and volunteers in Lyon recorded twice as many pollinator "
            "visits on rooftops with bees.",
            "Which of the two pieces of evidence is weaker, and why?",
        ),
    ),
    (
        "extraction",
        (
            "Given these lines from a server log, list each distinct error code with the number of "
            "times it appears:\n\n10:01 GET /api/users 200\n10:02 GET /api/orders 500\n10:02 POST "
            "/api/login 401\n10:03 GET /api/orders 500\n10:05 GET /api/items 404\n10:06 POST "
            "/api/login 401",
        ),
    ),
    (
        "extraction",
        (
            "What ingredients in this product label are allergens? Return a JSON array.\n\n"
            "Ingredients: oat flakes, honey, roasted hazelnuts, sunflower oil, skimmed milk powder, "
            "soy lecithin, sea salt.",
        ),
    ),
    # ------------------------------------------------------------------- stem
    (
        "stem",
        ("Explain how a lithium-ion battery stores and releases energy, in terms a high school student can follow.",),
    ),
    ("stem", ("Why does ice float on liquid water? Explain in terms of hydrogen bonding.",)),
    ("stem", ("What is CRISPR-Cas9 and how is it used to edit genes?",)),
    (
        "stem",
        (
            "Describe the main stages of the water cycle.",
            "How is climate change expected to alter each of those stages?",
        ),
    ),
    ("stem", ("Compare the structure and the function of DNA and RNA.",)),
    (
        "stem",
        (
            "What is the difference between nuclear fission and nuclear fusion, and why is fusion so "
            "hard to achieve in practice?",
        ),
    ),
    ("stem", ("Explain entropy to someone who has never taken a physics class.",)),
    ("stem", ("How do vaccines train the immune system? Mention memory B cells and T cells in your answer.",)),
    (
        "stem",
        (
            "A 2 kg object falls from a height of 20 m. Ignoring air resistance, what is its speed "
            "just before it hits the ground? Show the physics.",
        ),
    ),
    ("stem", ("What causes the northern lights, and why are they usually seen near the poles?",)),
    (
        "stem",
        (
            "What is the event horizon of a black hole?",
            "What would happen to an astronaut falling into a supermassive black hole compared with "
            "a stellar-mass one?",
        ),
    ),
    ("stem", ("Explain how GPS receivers work out their position, and why relativity matters for GPS accuracy.",)),
    # ------------------------------------------------------------- humanities
    ("humanities", ("What were the main causes of the French Revolution?",)),
    ("humanities", ("Compare the ideas of Confucius and Aristotle about virtue.",)),
    (
        "humanities",
        ("How did Gutenberg's printing press change European society in the fifteenth and sixteenth centuries?",),
    ),
    (
        "humanities",
        (
            "Summarize the plot and central themes of Mary Shelley's Frankenstein.",
            "How do those themes relate to today's debates about artificial intelligence?",
        ),
    ),
    ("humanities", ("Explain the concept of opportunity cost with an everyday example.",)),
    ("humanities", ("What is the significance of the Magna Carta in the history of constitutional law?",)),
    ("humanities", ("Discuss how the Silk Road encouraged cultural and religious exchange, not just trade in goods.",)),
    (
        "humanities",
        (
            "What are the main differences between utilitarian and deontological ethics? Describe a "
            "dilemma where they give different answers.",
        ),
    ),
    ("humanities", ("Analyze the symbolism of the green light in The Great Gatsby.",)),
    ("humanities", ("Why did the Roman Republic turn into an empire?",)),
    (
        "humanities",
        (
            "Explain what inflation is and how central banks try to control it.",
            "What are the risks if a central bank raises interest rates too quickly?",
        ),
    ),
    ("humanities", ("How did the Harlem Renaissance influence American music and literature?",)),
    # --------------------------------------------------------------- everyday
    ("everyday", ("How can I get my toddler to sleep through the night?",)),
    ("everyday", ("What's a good way to start running if I've never done it before and I'm a bit overweight?",)),
    ("everyday", ("My fiddle-leaf fig's leaves are turning yellow. What could be wrong?",)),
    ("everyday", ("How do I remove a red wine stain from a wool carpet?",)),
    (
        "everyday",
        (
            "I'm planning a three-day trip to Lisbon in April. What should I see?",
            "I'd also like to take one day trip outside the city. Which would you pick, and how do I get there?",
        ),
    ),
    ("everyday", ("What should I consider when choosing between leasing and buying a car?",)),
    ("everyday", ("Give me a simple weekly meal plan for a vegetarian family of four on a tight budget.",)),
    ("everyday", ("How do I politely decline a wedding invitation from a coworker?",)),
    ("everyday", ("What are some tips for staying focused while working from home with noisy roommates?",)),
    ("everyday", ("How often should I replace my toothbrush, and does an electric one really make a difference?",)),
]

# Words and phrases specific to the eval prompts. No training prompt may contain any of them
# (matched case-insensitively on the normalized text, at word boundaries).
RESERVED_TERMS: list[str] = [
    "railway line",
    "walking trail",
    "lighthouse",
    "solar powered backpack",
    "antarctica",
    "polar night",
    "crow who",
    "eulogy",
    "bookstore",
    "wedding toast",
    "animal shelter",
    "semicolons",
    "chess",
    "grocery lists",
    "airline",
    "crew scheduling",
    "street food vendor",
    "blacksmith",
    "tempering",
    "whaling",
    "video game studio",
    "game jam",
    "marie curie",
    "archivist",
    "rare manuscripts",
    "gondolier",
    "venice",
    "rialto",
    "internet provider",
    "socratic",
    "seasons",
    "sommelier",
    "risotto",
    "jazz club",
    "alien anthropologist",
    "birthday parties",
    "personal trainer",
    "bloops",
    "razzies",
    "lazzies",
    "cleo",
    "notebook and a pen",
    "violin",
    "cello",
    "viola",
    "double bass",
    "nickel",
    "widgets",
    "hour hand",
    "minute hand",
    "priya",
    "daylight saving",
    "round robin",
    "wash my car",
    "mislabeled",
    "labeled apples",
    "decagon",
    "interior angles",
    "square root of 3",
    "marbles",
    "consecutive odd",
    "compounded annually",
    "euclidean algorithm",
    "ipv4",
    "lru",
    "least recently used",
    "thread",
    "threads",
    "customer id",
    "bash one liner",
    "rotated sorted",
    "fibonacci",
    "prime numbers indefinitely",
    "yield from",
    "to do list",
    "most frequent words",
    "halvorsen",
    "ferry",
    "bergen",
    "observatory",
    "buckwheat",
    "tent",
    "priyanka",
    "saffron",
    "harborhall",
    "neptune",
    "qf 23",
    "okafor",
    "beatriz",
    "luis ortega",
    "rental agreement",
    "urban beekeeping",
    "server log",
    "allergens",
    "hazelnuts",
    "lithium ion",
    "ice float",
    "hydrogen bonding",
    "crispr",
    "water cycle",
    "dna and rna",
    "fission",
    "fusion",
    "entropy",
    "vaccines",
    "memory b cells",
    "northern lights",
    "aurora",
    "event horizon",
    "black hole",
    "gps",
    "french revolution",
    "confucius",
    "aristotle",
    "gutenberg",
    "printing press",
    "frankenstein",
    "mary shelley",
    "opportunity cost",
    "magna carta",
    "silk road",
    "utilitarian",
    "deontological",
    "great gatsby",
    "green light",
    "roman republic",
    "inflation",
    "central bank",
    "central banks",
    "harlem renaissance",
    "toddler",
    "start running",
    "fiddle leaf",
    "red wine stain",
    "wool carpet",
    "lisbon",
    "leasing",
    "vegetarian family",
    "wedding invitation",
    "working from home",
    "roommates",
    "toothbrush",
]
