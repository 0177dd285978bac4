# Слова бота українською. Ідентифікатори й плейсхолдери — ті самі, що в англійському файлі
# (це перевіряється під час запуску). Текст надсилається без розмітки.

## Формати

date-time-format = %-d %B %Y р. о %H:%M (UTC)
channel-fallback = Канал { $id }
price-stars = { $amount } ⭐
price-money =
    { $amount } { $currency ->
        [UAH] ₴
        [USD] $
        [EUR] €
       *[other] { $currency }
    }
period =
    { $days ->
        [one] { $days } день
        [few] { $days } дні
        [many] { $days } днів
       *[other] { $days } дня
    }
percent = { $percent } %

## Форма оплати Telegram (відмова на pre-checkout; не довше за 100 символів)

pre-checkout-busy = Будь ласка, спробуйте ще раз трохи згодом.
pre-checkout-unknown-order = Не вдалося знайти це замовлення. Будь ласка, оформіть нове.
pre-checkout-order-cancelled = Це замовлення скасовано. Будь ласка, оформіть нове.
pre-checkout-already-paid = Це замовлення вже оплачено.
pre-checkout-payer-mismatch = Цей рахунок виставлено іншому обліковому запису Telegram.
pre-checkout-currency-mismatch = Це замовлення не можна оплатити зірками Telegram.
pre-checkout-amount-mismatch = Сума рахунку не збігається із замовленням. Будь ласка, оформіть нове.
pre-checkout-channel-inactive = Цей канал зараз не приймає нових підписок.
pre-checkout-hold-expired = Термін дії цього рахунку минув. Будь ласка, оформіть нове замовлення.
pre-checkout-no-seat = Це місце щойно зайняли. Виберіть інший канал або спробуйте пізніше.
pre-checkout-hold-limited = Ви нещодавно бронювали тут місце без оплати. Спробуйте пізніше.
pre-checkout-promo-exhausted = Ця ціна вже недоступна. Будь ласка, оформіть нове замовлення.
pre-checkout-already-lifetime = У вас уже є безстроковий доступ до цього каналу.
pre-checkout-hold-limited-until = Ви нещодавно бронювали тут місце без оплати. Спробуйте після { $when }.

## Доступ

grant =
    Оплату отримано, дякуємо! Ваш доступ до «{ $title }» діє до { $until }.

    Приєднатися: { $link }
    Натисніть посилання й надішліть запит на вступ — учасникам його схвалюють автоматично.
grant-for-life =
    Оплату отримано, дякуємо! Ваш доступ до «{ $title }» безстроковий: він ніколи не закінчиться.

    Приєднатися: { $link }
    Натисніть посилання й надішліть запит на вступ — учасникам його схвалюють автоматично.
renewal-receipt = Оплату отримано, дякуємо! Тепер ваш доступ до «{ $title }» діє до { $until }.
lifetime-receipt = Оплату отримано, дякуємо! Відтепер ваш доступ до «{ $title }» безстроковий: він ніколи не закінчиться.
reminder = Ваш доступ до «{ $title }» закінчується { $ends }. Продовжте його до цього часу, щоб не втратити: /subscriptions
grace-notice = Ваш доступ до «{ $title }» закінчився { $expired }. Зараз діє короткий пільговий період: продовжте доступ, щоб зберегти своє місце: /subscriptions

## Каталог (/start, /help, посилання на канал)

catalogue-header = Ось канали, до яких можна приєднатися:
catalogue-footer = Натисніть кнопку, щоб купити. /subscriptions покаже ваші канали.
catalogue-empty = Зараз немає каналів у продажу. Загляньте, будь ласка, пізніше.
unknown-channel = На жаль, цей канал недоступний.
unknown-plan = На жаль, цей тариф недоступний.
more-button = Ще канали ›
help =
    Я продаю доступ до приватних каналів.

    /start — канали, до яких можна приєднатися.
    /subscriptions — ваші канали.
    /code КОД — застосувати промокод до наступного замовлення.
    /language — змінити мову, якою я пишу.
price-line-recurring = { $price } кожні { $period }, продовжується автоматично
price-line-period = { $price } за { $period }
price-line-lifetime = { $price }, безстроковий доступ
discounted = { $price } замість { $listPrice }
trial-line = безкоштовно на { $period }
plan-line = • { $name }: { $line }
bundle-line = Також дає доступ до { $titles }.
have-lifetime = У вас безстроковий доступ.
full = Зараз немає вільних місць.
not-on-sale = Зараз не продається.
trial-button = Спробувати безкоштовно: { $period }
buy-button = Купити: { $title } · { $price }
subscribe-button = Підписатися: { $title } · { $price }

## Відповіді на кнопки (до 200 символів)

invoice-on-its-way = Зараз надішлю рахунок.
invoice-already-sent = Рахунок за цей канал — у чаті вище, він досі дійсний.
button-invalid = Ця кнопка вже не діє. Надішліть /start, щоб побачити канали.
channel-unavailable = На жаль, цей канал більше недоступний. Надішліть /start, щоб побачити канали.
promo-price-gone = На жаль, ця ціна вже недоступна. Будь ласка, оформіть нове замовлення.
channel-full = На жаль, у «{ $title }» зараз немає вільних місць. Спробуйте пізніше.
hold-limited-cooldown = Ваше останнє бронювання місця в «{ $title }» закінчилося до оплати. Спробувати знову можна після { $when }.
hold-limited-daily = Сьогодні ви вже кілька разів бронювали місце в «{ $title }» без оплати. Спробувати знову можна після { $when }.
cannot-be-paid = На жаль, «{ $title }» зараз не можна оплатити. Спробуйте пізніше.
already-lifetime = У вас уже є безстроковий доступ до «{ $title }». Більше нічого купувати не потрібно.
trial-used = Ви вже мали пробний період або підписку на «{ $title }»: безкоштовна спроба — лише для нових учасників.
free-access-granted = Готово! Ваш безкоштовний доступ до «{ $title }» розпочався. Посилання для вступу надішлю окремим повідомленням.
code-refused-at-order = Код { $code } не можна застосувати до цього замовлення ({ $why }). Натисніть кнопку ще раз, щоб купити за повною ціною { $listPrice }.
already-subscribed = Ви вже підписані на «{ $title }»; підписка продовжиться автоматично { $renewsAt }.
renewal-cancelled = Автопродовження скасовано. Доступ збережеться до кінця оплаченого терміну.
renewal-already-cancelled = Автопродовження цієї підписки вже скасовано.

## Рахунки (назва до 32 символів, опис до 255)

invoice-description-period = Доступ до «{ $title }» на { $period }.
invoice-description-lifetime = Безстроковий доступ до «{ $title }».
invoice-label-period = Доступ на { $period }
invoice-label-lifetime = Безстроковий доступ
subscription-offer = Підписка на «{ $title }»: { $price } кожні { $period }, списується автоматично, доки ви її не скасуєте (/subscriptions). Натисніть кнопку, щоб оплатити зірками Telegram.
subscription-button = Підписатися за { $price }
card-offer-period =
    Оплатіть { $price } карткою за доступ до «{ $title }» на { $period }. Сторінка оплати діятиме { $minutes ->
        [one] { $minutes } хвилину
        [few] { $minutes } хвилини
        [many] { $minutes } хвилин
       *[other] { $minutes } хвилини
    }.
card-offer-lifetime =
    Оплатіть { $price } карткою за безстроковий доступ до «{ $title }». Сторінка оплати діятиме { $minutes ->
        [one] { $minutes } хвилину
        [few] { $minutes } хвилини
        [many] { $minutes } хвилин
       *[other] { $minutes } хвилини
    }.
card-button = Оплатити { $price } карткою
card-button-via = Оплатити { $price } карткою ({ $gateway })

## Промокоди (/code, посилання з кодом)

code-usage = Надішліть /code і свій промокод, наприклад: /code SPRING25
code-applied = Код { $code } застосовано: { $gives }. Він чекатиме на ваше наступне замовлення протягом години; ціни з ним видно в /start.
code-gives-on = −{ $off } на { $plans }
code-gives-all = −{ $off } на всі тарифи
code-refused = На жаль, код { $code } не можна використати: { $why }.
code-unknown = такого коду немає
code-inactive = він більше не діє
code-expired = термін його дії минув
code-exhausted = ліміт використань вичерпано
code-used-by-you = ви вже ним скористалися
code-not-for-plan = він не діє для цього тарифу
code-first-purchase = він лише для першої покупки
code-no-plan = жоден тариф у продажу його не приймає
code-taken = він більше недоступний

## /subscriptions

subscriptions-header = Ваші канали:
subscriptions-empty = У вас поки немає каналів. Надішліть /start, щоб побачити канали, до яких можна приєднатися.
subscriptions-more = …і ще { $count }.
membership-ended = Доступ завершено.
membership-lifetime = Безстроковий доступ: ніколи не закінчується.
membership-active = Діє до { $at }.
membership-grace = Доступ закінчився { $at }; зараз діє короткий пільговий період — продовжте, щоб зберегти його.
membership-expired = Доступ закінчився { $at }.
renews-automatically = Продовжиться автоматично { $renewsAt }.
renewal-off = Автопродовження скасовано: підписка не продовжиться.
renew-button = Продовжити: { $title }
cancel-renewal-button = Скасувати автопродовження: { $title }
subscription-cancelled-until = Вашу підписку на «{ $title }» не буде продовжено. Доступ збережеться до { $until }.
subscription-cancelled = Вашу підписку на «{ $title }» не буде продовжено.

## /language

language-choose = Виберіть мову, якою я вам писатиму:
language-chosen = Відтепер я пишу українською.

## Що сталося з платежем

payment-refunded-seat = На жаль, останнє місце в «{ $title }» зайняли раніше, ніж надійшов ваш платіж { $price }. Зірки буде повернуто.
payment-refunded = Не вдалося зарахувати ваш платіж { $price } за «{ $title }» (замовлення вже оплачено або термін дії рахунку минув). Зірки буде повернуто.
payment-in-review-seat = На жаль, останнє місце в «{ $title }» зайняли раніше, ніж надійшов ваш платіж { $price }. Ми перевіримо платіж і зв’яжемося з вами щодо повернення коштів.
payment-in-review = Не вдалося автоматично зарахувати ваш платіж { $price } за «{ $title }». Ми його перевіримо й зв’яжемося з вами.
subscription-stopped-channel-inactive = Канал зараз не приймає нових підписок, тож ми скасували цю підписку: більше з вас за неї нічого не спишуть.
subscription-stopped-no-seat = У каналі немає вільних місць, тож ми скасували цю підписку: більше з вас за неї нічого не спишуть.
subscription-stopped-hold-expired = Термін дії рахунку минув, тож ми скасували цю підписку: більше з вас за неї нічого не спишуть.
subscription-stopped-already-paid = За це замовлення у вас уже є підписка, тож ми скасували цю підписку: більше з вас за неї нічого не спишуть.
subscription-stopped-already-lifetime = У вас уже є безстроковий доступ до цього каналу, тож ми скасували цю підписку: більше з вас за неї нічого не спишуть.
subscription-stopped-promo-exhausted = Ціна за промокодом уже недоступна, тож ми скасували цю підписку: більше з вас за неї нічого не спишуть.
subscription-stopped = Тож ми скасували цю підписку: більше з вас за неї нічого не спишуть.
payment-already-lifetime-refunded = У вас уже є безстроковий доступ до «{ $title }», тож платіж { $price } був не потрібен. Зірки буде повернуто.
payment-already-lifetime-review = У вас уже є безстроковий доступ до «{ $title }», тож платіж { $price } був не потрібен. Ми його перевіримо й зв’яжемося з вами щодо повернення коштів.
payment-unknown-order = Ми отримали ваш платіж { $price }, але не змогли пов’язати його із замовленням. Ми його перевіримо й зв’яжемося з вами.

## Спроби вгадати промокод і зміни Stars-підписок у Telegram

code-too-many =
    Забагато неправильних кодів. Спробуйте ще раз через { $minutes ->
        [one] { $minutes } хвилину
        [few] { $minutes } хвилини
        [many] { $minutes } хвилин
       *[other] { $minutes } хвилини
    }.
subscription-renewal-failed-until = Telegram не зміг списати оплату за продовження вашої підписки на «{ $title }». Доступ збережеться до { $until }. Щоб не втратити його, поповніть баланс Telegram Stars і відновіть підписку в Telegram (Налаштування → Мої зірки) або купіть знову тут: /subscriptions
subscription-renewal-failed = Telegram не зміг списати оплату за продовження вашої підписки на «{ $title }». Щоб не втратити доступ, поповніть баланс Telegram Stars і відновіть підписку в Telegram (Налаштування → Мої зірки) або купіть знову тут: /subscriptions
reminder-renews = Ваша підписка на «{ $title }» продовжиться автоматично { $renewsAt }. Подбайте, щоб на балансі було досить Telegram Stars. Скасувати: /subscriptions
