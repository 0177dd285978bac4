# Слова бота по-русски. Идентификаторы и плейсхолдеры — те же, что в английском файле
# (это проверяется при запуске). Текст отправляется без разметки.

## Форматы

date-time-format = %-d %B %Y г. в %H:%M (UTC)
channel-fallback = Канал { $id }
price-stars = { $amount } ⭐
price-money =
    { $amount } { $currency ->
        [UAH] ₴
        [RUB] ₽
        [USD] $
        [EUR] €
       *[other] { $currency }
    }
period =
    { $days ->
        [one] { $days } день
        [few] { $days } дня
        [many] { $days } дней
       *[other] { $days } дня
    }
percent = { $percent } %

## Форма оплаты Telegram (отказ на pre-checkout; не длиннее 100 символов)

pre-checkout-busy = Пожалуйста, попробуйте ещё раз чуть позже.
pre-checkout-unknown-order = Не удалось найти этот заказ. Пожалуйста, оформите новый.
pre-checkout-order-cancelled = Этот заказ отменён. Пожалуйста, оформите новый.
pre-checkout-already-paid = Этот заказ уже оплачен.
pre-checkout-payer-mismatch = Этот счёт выставлен другому аккаунту Telegram.
pre-checkout-currency-mismatch = Этот заказ нельзя оплатить звёздами Telegram.
pre-checkout-amount-mismatch = Сумма счёта не совпадает с заказом. Пожалуйста, оформите новый.
pre-checkout-channel-inactive = Этот канал сейчас не принимает новые подписки.
pre-checkout-hold-expired = Срок действия этого счёта истёк. Пожалуйста, оформите новый заказ.
pre-checkout-no-seat = Это место только что заняли. Выберите другой канал или попробуйте позже.
pre-checkout-hold-limited = Вы недавно бронировали здесь место без оплаты. Попробуйте позже.
pre-checkout-promo-exhausted = Эта цена уже недоступна. Пожалуйста, оформите новый заказ.
pre-checkout-already-lifetime = У вас уже есть бессрочный доступ к этому каналу.
pre-checkout-hold-limited-until = Вы недавно бронировали здесь место без оплаты. Попробуйте после { $when }.

## Доступ

grant =
    Оплата получена, спасибо! Ваш доступ к «{ $title }» действует до { $until }.

    Вступить: { $link }
    Нажмите на ссылку и отправьте заявку на вступление — участникам её одобряют автоматически.
grant-for-life =
    Оплата получена, спасибо! Ваш доступ к «{ $title }» бессрочный: он никогда не закончится.

    Вступить: { $link }
    Нажмите на ссылку и отправьте заявку на вступление — участникам её одобряют автоматически.
renewal-receipt = Оплата получена, спасибо! Теперь ваш доступ к «{ $title }» действует до { $until }.
lifetime-receipt = Оплата получена, спасибо! Теперь ваш доступ к «{ $title }» бессрочный: он никогда не закончится.
reminder = Ваш доступ к «{ $title }» заканчивается { $ends }. Продлите его заранее, чтобы не потерять: /subscriptions
grace-notice = Ваш доступ к «{ $title }» закончился { $expired }. Сейчас идёт короткий льготный период: продлите доступ, чтобы сохранить своё место: /subscriptions

## Каталог (/start, /help, ссылки на канал)

catalogue-header = Вот каналы, к которым можно присоединиться:
catalogue-footer = Нажмите кнопку, чтобы купить. /subscriptions покажет ваши каналы.
catalogue-empty = Сейчас нет каналов в продаже. Загляните, пожалуйста, позже.
unknown-channel = К сожалению, этот канал недоступен.
unknown-plan = К сожалению, этот тариф недоступен.
more-button = Ещё каналы ›
help =
    Я продаю доступ к закрытым каналам.

    /start — каналы, к которым можно присоединиться.
    /subscriptions — ваши каналы.
    /code КОД — применить промокод к следующему заказу.
    /language — сменить язык, на котором я пишу.
price-line-recurring = { $price } каждые { $period }, продлевается автоматически
price-line-period = { $price } за { $period }
price-line-lifetime = { $price }, бессрочный доступ
discounted = { $price } вместо { $listPrice }
trial-line = бесплатно на { $period }
plan-line = • { $name }: { $line }
bundle-line = Также даёт доступ к { $titles }.
have-lifetime = У вас бессрочный доступ.
full = Сейчас свободных мест нет.
not-on-sale = Сейчас не продаётся.
trial-button = Попробовать бесплатно: { $period }
buy-button = Купить: { $title } · { $price }
subscribe-button = Подписаться: { $title } · { $price }

## Ответы на кнопки (до 200 символов)

invoice-on-its-way = Сейчас пришлю счёт.
invoice-already-sent = Счёт за этот канал — в чате выше, он ещё действителен.
button-invalid = Эта кнопка больше не действует. Отправьте /start, чтобы увидеть каналы.
channel-unavailable = К сожалению, этот канал больше недоступен. Отправьте /start, чтобы увидеть каналы.
promo-price-gone = К сожалению, эта цена уже недоступна. Пожалуйста, оформите новый заказ.
channel-full = К сожалению, в «{ $title }» сейчас нет свободных мест. Попробуйте позже.
hold-limited-cooldown = Ваша последняя бронь места в «{ $title }» истекла до оплаты. Попробовать снова можно после { $when }.
hold-limited-daily = Сегодня вы уже несколько раз бронировали место в «{ $title }» без оплаты. Попробовать снова можно после { $when }.
cannot-be-paid = К сожалению, «{ $title }» сейчас нельзя оплатить. Попробуйте позже.
already-lifetime = У вас уже есть бессрочный доступ к «{ $title }». Больше ничего покупать не нужно.
trial-used = У вас уже был пробный период или подписка на «{ $title }»: бесплатная проба — только для новых участников.
free-access-granted = Готово! Ваш бесплатный доступ к «{ $title }» начался. Ссылку для вступления пришлю отдельным сообщением.
code-refused-at-order = Код { $code } нельзя применить к этому заказу ({ $why }). Нажмите кнопку ещё раз, чтобы купить по полной цене { $listPrice }.
already-subscribed = Вы уже подписаны на «{ $title }»; подписка продлится автоматически { $renewsAt }.
renewal-cancelled = Автопродление отменено. Доступ сохранится до конца оплаченного срока.
renewal-already-cancelled = Автопродление этой подписки уже отменено.

## Счета (название до 32 символов, описание до 255)

invoice-description-period = Доступ к «{ $title }» на { $period }.
invoice-description-lifetime = Бессрочный доступ к «{ $title }».
invoice-label-period = Доступ на { $period }
invoice-label-lifetime = Бессрочный доступ
subscription-offer = Подписка на «{ $title }»: { $price } каждые { $period }, списывается автоматически, пока вы её не отмените (/subscriptions). Нажмите кнопку, чтобы оплатить звёздами Telegram.
subscription-button = Подписаться за { $price }
card-offer-period =
    Оплатите { $price } картой за доступ к «{ $title }» на { $period }. Страница оплаты будет открыта { $minutes ->
        [one] { $minutes } минуту
        [few] { $minutes } минуты
        [many] { $minutes } минут
       *[other] { $minutes } минуты
    }.
card-offer-lifetime =
    Оплатите { $price } картой за бессрочный доступ к «{ $title }». Страница оплаты будет открыта { $minutes ->
        [one] { $minutes } минуту
        [few] { $minutes } минуты
        [many] { $minutes } минут
       *[other] { $minutes } минуты
    }.
card-button = Оплатить { $price } картой
card-button-via = Оплатить { $price } картой ({ $gateway })

## Промокоды (/code, ссылки с кодом)

code-usage = Отправьте /code и свой промокод, например: /code SPRING25
code-applied = Код { $code } применён: { $gives }. Он сохранится для вашего следующего заказа на час; цены с ним видны в /start.
code-gives-on = −{ $off } на { $plans }
code-gives-all = −{ $off } на все тарифы
code-refused = К сожалению, код { $code } нельзя использовать: { $why }.
code-unknown = такого кода нет
code-inactive = он больше не действует
code-expired = срок его действия истёк
code-exhausted = лимит использований исчерпан
code-used-by-you = вы уже им воспользовались
code-not-for-plan = он не действует для этого тарифа
code-first-purchase = он только для первой покупки
code-no-plan = ни один тариф в продаже его не принимает
code-taken = он больше недоступен

## /subscriptions

subscriptions-header = Ваши каналы:
subscriptions-empty = У вас пока нет каналов. Отправьте /start, чтобы увидеть каналы, к которым можно присоединиться.
subscriptions-more = …и ещё { $count }.
membership-ended = Доступ завершён.
membership-lifetime = Бессрочный доступ: никогда не заканчивается.
membership-active = Действует до { $at }.
membership-grace = Доступ закончился { $at }; сейчас идёт короткий льготный период — продлите, чтобы сохранить его.
membership-expired = Доступ закончился { $at }.
renews-automatically = Продлится автоматически { $renewsAt }.
renewal-off = Автопродление отменено: подписка не продлится.
renew-button = Продлить: { $title }
cancel-renewal-button = Отменить автопродление: { $title }
subscription-cancelled-until = Ваша подписка на «{ $title }» не будет продлена. Доступ сохранится до { $until }.
subscription-cancelled = Ваша подписка на «{ $title }» не будет продлена.

## /language

language-choose = Выберите язык, на котором я буду вам писать:
language-chosen = Теперь я пишу по-русски.

## Что случилось с платежом

payment-refunded-seat = К сожалению, последнее место в «{ $title }» заняли раньше, чем пришёл ваш платёж { $price }. Звёзды будут возвращены.
payment-refunded = Не удалось зачесть ваш платёж { $price } за «{ $title }» (заказ уже оплачен или срок действия счёта истёк). Звёзды будут возвращены.
payment-in-review-seat = К сожалению, последнее место в «{ $title }» заняли раньше, чем пришёл ваш платёж { $price }. Мы проверим платёж и свяжемся с вами насчёт возврата.
payment-in-review = Не удалось автоматически зачесть ваш платёж { $price } за «{ $title }». Мы его проверим и свяжемся с вами.
subscription-stopped-channel-inactive = Канал сейчас не принимает новые подписки, поэтому мы отменили эту подписку: больше за неё ничего не спишут.
subscription-stopped-no-seat = В канале нет свободных мест, поэтому мы отменили эту подписку: больше за неё ничего не спишут.
subscription-stopped-hold-expired = Срок действия счёта истёк, поэтому мы отменили эту подписку: больше за неё ничего не спишут.
subscription-stopped-already-paid = По этому заказу у вас уже есть подписка, поэтому мы отменили эту подписку: больше за неё ничего не спишут.
subscription-stopped-already-lifetime = У вас уже есть бессрочный доступ к этому каналу, поэтому мы отменили эту подписку: больше за неё ничего не спишут.
subscription-stopped-promo-exhausted = Цена по промокоду уже недоступна, поэтому мы отменили эту подписку: больше за неё ничего не спишут.
subscription-stopped = Поэтому мы отменили эту подписку: больше за неё ничего не спишут.
payment-already-lifetime-refunded = У вас уже есть бессрочный доступ к «{ $title }», поэтому платёж { $price } не понадобился. Звёзды будут возвращены.
payment-already-lifetime-review = У вас уже есть бессрочный доступ к «{ $title }», поэтому платёж { $price } не понадобился. Мы его проверим и свяжемся с вами насчёт возврата.
payment-unknown-order = Мы получили ваш платёж { $price }, но не смогли сопоставить его с заказом. Мы его проверим и свяжемся с вами.

## Попытки угадать промокод и изменения Stars-подписок в Telegram

code-too-many =
    Слишком много неверных кодов. Попробуйте ещё раз через { $minutes ->
        [one] { $minutes } минуту
        [few] { $minutes } минуты
        [many] { $minutes } минут
       *[other] { $minutes } минуты
    }.
subscription-renewal-failed-until = Telegram не смог списать оплату за продление вашей подписки на «{ $title }». Доступ сохранится до { $until }. Чтобы не потерять его, пополните баланс Telegram Stars и возобновите подписку в Telegram (Настройки → Мои звёзды) или купите снова здесь: /subscriptions
subscription-renewal-failed = Telegram не смог списать оплату за продление вашей подписки на «{ $title }». Чтобы не потерять доступ, пополните баланс Telegram Stars и возобновите подписку в Telegram (Настройки → Мои звёзды) или купите снова здесь: /subscriptions
reminder-renews = Ваша подписка на «{ $title }» продлится автоматически { $renewsAt }. Позаботьтесь, чтобы на балансе хватало Telegram Stars. Отменить: /subscriptions
